"""``TelegramChannel.start`` against the fake Bot API: the set-up (token check, command
menu, no webhook) once, then the long poll; a refused token fails start, an unreachable
Telegram does not. While the app starts its sink waits (``agent.app.gate``): what the
poll read is confirmed to Telegram only once the sink has stored it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from channels.telegram import TelegramChannel
from channels.types import InboundMessage
from runtime.backoff import Backoff
from tests.fakes.fixtures import fake
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.waiting import until

__all__ = ["fake"]  # a fixture, imported for pytest


def channel(fake: FakeTelegram) -> TelegramChannel:
    return TelegramChannel(TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=0.01, cap=0.1))


class Store:
    """A sink that keeps the texts it is given; with ``opened``, only once it is set
    (the app's sink while its database opens)."""

    def __init__(self, opened: asyncio.Event | None = None) -> None:
        self.offered: list[str] = []
        """Texts handed over, stored or still waiting for ``opened``."""
        self.texts: list[str] = []
        self._opened = opened

    async def __call__(self, message: InboundMessage) -> bool:
        self.offered.append(message.text)
        if self._opened is not None:
            await self._opened.wait()
        self.texts.append(message.text)
        return True


async def test_start_sets_up_once_then_polls_and_stores_before_confirming(
    fake: FakeTelegram,
) -> None:
    stored = Store()
    update = fake.push_text(42, "hi")
    bot = channel(fake)
    await bot.start(stored)
    try:
        await fake.wait_confirmed(update["update_id"])
        assert stored.texts == ["hi"]
        methods = [m for m, _ in fake.calls]
        # One round trip of set-up, then the poll.
        assert sorted(methods[:3]) == ["deleteWebhook", "getMe", "setMyCommands"]
        assert methods[3] == "getUpdates"
        assert len(fake.calls_to("getMe")) == 1 and len(fake.calls_to("deleteWebhook")) == 1
    finally:
        await bot.stop()


async def test_the_set_up_is_one_round_trip(fake: FakeTelegram) -> None:
    """The token check, the command menu and the mode go together: with Telegram
    slow to answer getMe, the other two are already on their way."""
    fake.hanging.add("getMe")
    bot = channel(fake)
    starting = asyncio.create_task(bot.start(Store()))
    try:
        await fake.wait_for(
            lambda: {m for m, _ in fake.calls} == {"getMe", "setMyCommands", "deleteWebhook"}
        )
        assert fake.calls_to("getUpdates") == []  # not before the token is known good
    finally:
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await bot.stop()


async def test_a_refused_token_fails_start_and_never_polls(fake: FakeTelegram) -> None:
    fake.fail("getMe", 401, "Unauthorized")

    async def sink(message: InboundMessage) -> bool:
        raise AssertionError("nothing is received with a refused token")

    bot = channel(fake)
    with pytest.raises(RuntimeError, match="rejected the bot token"):
        await bot.start(sink)
    assert len(fake.calls_to("getMe")) == 1
    assert fake.calls_to("getUpdates") == []
    assert bot.status()["connected"] is False


async def test_telegram_down_at_start_is_retried_by_polling(fake: FakeTelegram) -> None:
    fake.fail("getMe", 502, "Bad Gateway")
    stored = Store()
    update = fake.push_text(42, "hello again")
    bot = channel(fake)
    await bot.start(stored)  # returns: the app starts without Telegram
    try:
        assert len(fake.calls_to("getMe")) == 1
        await fake.wait_confirmed(update["update_id"])
        assert stored.texts == ["hello again"]
        assert bot.status()["connected"] is True
        assert len(fake.calls_to("getMe")) == 2  # the failed one, then the poll loop's
    finally:
        await bot.stop()


async def test_what_the_poll_read_is_confirmed_only_once_the_sink_returns(
    fake: FakeTelegram,
) -> None:
    """The app's sink is closed while its database opens: the update is read and held,
    never confirmed, and Telegram is not asked again; once stored, it is confirmed."""
    store_open = asyncio.Event()
    stored = Store(opened=store_open)
    first = fake.push_text(42, "one")
    second = fake.push_text(43, "two")
    bot = channel(fake)
    await bot.start(stored)
    try:
        await until(lambda: stored.offered, "the poll's update handed to the sink")
        assert stored.texts == [] and fake.confirmed == []
        assert len(fake.calls_to("getUpdates")) == 1  # no second poll: it would confirm
        store_open.set()
        await fake.wait_confirmed(second["update_id"])
        assert sorted(stored.texts) == ["one", "two"]
        assert first["update_id"] in fake.confirmed
    finally:
        await bot.stop()


async def test_stopped_while_the_sink_waits_confirms_nothing(fake: FakeTelegram) -> None:
    """Start-up failed after the first poll (the database never opened): the update
    read meanwhile is not confirmed, so the next start is offered it again."""
    never_stored = Store(opened=asyncio.Event())  # never opens
    update = fake.push_text(42, "keep me")
    bot = channel(fake)
    await bot.start(never_stored)
    await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) == 1)
    await bot.stop()
    assert update["update_id"] not in fake.confirmed

    stored = Store()
    again = channel(fake)
    await again.start(stored)
    try:
        await fake.wait_confirmed(update["update_id"])
        assert never_stored.texts == [] and stored.texts == ["keep me"]
    finally:
        await again.stop()


async def test_a_refused_long_poll_waits_the_policy_or_what_telegram_asked(
    fake: FakeTelegram,
) -> None:
    """A 429 on ``getUpdates`` is one more failure of the poll loop: it waits the loop's
    next pause, or longer when Telegram asked for longer, never only what was asked."""
    fake.fail("getUpdates", 429, "Too Many Requests: retry after 1", retry_after=1)
    stored = Store()
    update = fake.push_text(42, "after the pause")
    bot = TelegramChannel(TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=1.5, cap=1.5))
    started = asyncio.get_running_loop().time()
    await bot.start(stored)
    try:
        await fake.wait_confirmed(update["update_id"])
        assert stored.texts == ["after the pause"]
        assert asyncio.get_running_loop().time() - started >= 1.5
    finally:
        await bot.stop()
