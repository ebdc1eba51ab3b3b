"""``TelegramChannel.prepare``: the set-up done ahead of ``start`` (while the app's
database starts), against the fake Bot API. ``start`` then polls at once, reports a
set-up failure as its own, and never waits for a second set-up."""

from __future__ import annotations

import pytest

from channels.telegram import TelegramChannel
from channels.types import InboundMessage
from tests.fakes.fixtures import fake
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["fake"]  # a fixture, imported for pytest


def channel(fake: FakeTelegram) -> TelegramChannel:
    return TelegramChannel(TOKEN, fake.url, poll_timeout=1, retry_delays=(0.01, 0.1))


async def test_prepared_channel_sets_up_once_and_stores_before_confirming(
    fake: FakeTelegram,
) -> None:
    bot = channel(fake)
    await bot.prepare()
    assert fake.calls[0][0] == "getMe"
    assert sorted(m for m, _ in fake.calls) == ["deleteWebhook", "getMe", "setMyCommands"]
    stored: list[str] = []

    async def sink(message: InboundMessage) -> bool:
        stored.append(message.text)
        return True

    update = fake.push_text(42, "hi")
    await bot.start(sink)
    try:
        await fake.wait_confirmed(update["update_id"])
        assert stored == ["hi"]
        assert len(fake.calls_to("getMe")) == 1 and len(fake.calls_to("deleteWebhook")) == 1
    finally:
        await bot.stop()


async def test_a_token_refused_while_preparing_fails_start(fake: FakeTelegram) -> None:
    fake.fail("getMe", 401, "Unauthorized")
    bot = channel(fake)
    await bot.prepare()  # the failure is start's to report

    async def sink(message: InboundMessage) -> bool:
        raise AssertionError("nothing is received with a refused token")

    with pytest.raises(RuntimeError, match="rejected the bot token"):
        await bot.start(sink)
    assert len(fake.calls_to("getMe")) == 1
    assert fake.calls_to("getUpdates") == []


async def test_telegram_down_while_preparing_is_retried_by_polling(fake: FakeTelegram) -> None:
    fake.fail("getMe", 502, "Bad Gateway")
    bot = channel(fake)
    await bot.prepare()
    stored: list[str] = []

    async def sink(message: InboundMessage) -> bool:
        stored.append(message.text)
        return True

    update = fake.push_text(42, "hello again")
    await bot.start(sink)
    try:
        assert len(fake.calls_to("getMe")) == 1  # start did not wait for a second try
        await fake.wait_confirmed(update["update_id"])
        assert stored == ["hello again"]
        assert bot.status()["connected"] is True
        assert len(fake.calls_to("getMe")) == 2  # the failed one, then the poll loop's
    finally:
        await bot.stop()
