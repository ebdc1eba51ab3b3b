"""Sends paced to the published limits: the real python-telegram-bot and twilio SDKs
against fakes that answer 429 the moment a limit is broken.

Spacing is read from the fakes' own arrival times; the pace guarantees it whatever the
machine's load (a send counts from its answer, which comes after its arrival), so the
assertions are lower bounds that a slow machine only makes easier to meet.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.outbox import Outbox
from channels.pacing import Pace, PacingClosed, Window
from channels.sms import SmsChannel
from channels.telegram import TelegramChannel
from channels.telegram.flood import TELEGRAM_LIMITS, FloodLimits
from channels.types import InboundMessage, OutboundMessage, SendError
from runtime.backoff import Backoff
from tests.fakes.alert_app import FROM_NUMBER
from tests.fakes.fixtures import fake
from tests.fakes.telegram_api import TOKEN, FakeTelegram, FloodRules, Sent
from tests.fakes.twilio_api import FakeTwilio
from tests.waiting import until, until_async

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
HOOK = "https://bot.example.invalid/webhooks/telegram"  # webhook mode: no long poll


async def _ignore(_message: InboundMessage) -> bool:
    return True


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Callable[..., Any]]:
    """A started Telegram channel against the fake in flood mode (same limits on both
    sides unless a test says otherwise)."""
    started: list[TelegramChannel] = []

    async def make(limits: FloodLimits = TELEGRAM_LIMITS) -> TelegramChannel:
        fake.flood = FloodRules(
            limits.per_bot, limits.bot_period, limits.chat_gap, limits.per_group,
            limits.group_period,
        )  # fmt: skip
        channel = TelegramChannel(TOKEN, fake.url, webhook_url=HOOK, limits=limits)
        await channel.start(_ignore)
        started.append(channel)
        return channel

    yield make
    for channel in started:
        await channel.stop()


def _msg(chat: str | int, text: str) -> OutboundMessage:
    return OutboundMessage("telegram", str(chat), text, f"k-{chat}-{text}")


def _in(fake: FakeTelegram, chat: str | int) -> list[Sent]:
    return [s for s in fake.sent if s.chat_id == str(chat)]


def _gaps(sent: list[Sent]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(sent)]


# -- Telegram ---------------------------------------------------------------------------
async def test_a_burst_to_many_chats_meets_no_refusal(bot: Any, fake: FakeTelegram) -> None:
    channel: TelegramChannel = await bot()
    chats = [5000 + i for i in range(45)]  # half as many again as a second allows
    await asyncio.gather(*(channel.send(_msg(c, f"hello {c}")) for c in chats))
    assert fake.refusals == []
    assert sorted(int(s.chat_id) for s in fake.sent) == chats  # each once
    arrivals = sorted(s.at for s in fake.sent)
    assert arrivals[30] - arrivals[0] >= 1.0  # the 31st waited for the bot's second


async def test_one_chat_in_order_a_second_apart_and_no_other_chat_waits(
    bot: Any, fake: FakeTelegram
) -> None:
    channel: TelegramChannel = await bot()
    texts = ["first", "second", "third"]
    alone = asyncio.gather(*(channel.send(_msg(7001, t)) for t in texts))
    await until(lambda: _in(fake, 7001), "the first message")
    await channel.send(_msg(7002, "meanwhile"))  # another chat, while 7001 waits
    await alone
    assert fake.refusals == []
    chat = _in(fake, 7001)
    assert [s.text for s in chat] == texts
    assert all(gap >= 1.0 for gap in _gaps(chat))
    [other] = _in(fake, 7002)
    assert other.at < chat[1].at  # not held up behind the slow chat


async def test_a_long_reply_keeps_its_chunks_together_and_paced(
    bot: Any, fake: FakeTelegram
) -> None:
    channel: TelegramChannel = await bot(FloodLimits(chat_gap=0.3))
    long = "\n\n".join(f"part {i} " + "word " * 700 for i in range(3))  # three chunks
    await asyncio.gather(channel.send(_msg(7100, long)), channel.send(_msg(7100, "after")))
    assert fake.refusals == []
    chat = _in(fake, 7100)
    assert [s.visible.split(" ", 2)[:2] for s in chat[:3]] == [["part", str(i)] for i in range(3)]
    assert chat[-1].text == "after" and len(chat) == 4
    assert all(gap >= 0.3 for gap in _gaps(chat))


async def test_a_group_gets_at_most_its_share_per_period(bot: Any, fake: FakeTelegram) -> None:
    # Telegram's group limit is 20 a minute; a test keeps the rule and shrinks the minute.
    limits = FloodLimits(chat_gap=0.05, per_group=3, group_period=1.5)
    channel: TelegramChannel = await bot(limits)
    group = "-100500"
    texts = [f"news {i}" for i in range(5)]
    sends = asyncio.gather(*(channel.send(_msg(group, t)) for t in texts))
    await until(lambda: len(_in(fake, group)) >= 3, "the group's first three")
    await channel.send(_msg(8001, "private"))  # a person's chat does not wait for the group
    await sends
    assert fake.refusals == []
    sent = _in(fake, group)
    assert [s.text for s in sent] == texts
    assert sent[3].at - sent[0].at >= 1.5 and sent[4].at - sent[1].at >= 1.5
    [private] = _in(fake, 8001)
    assert private.at < sent[3].at


def test_the_defaults_are_telegrams_published_limits() -> None:
    limits = TELEGRAM_LIMITS
    assert (limits.per_bot, limits.bot_period) == (30, 1.0)
    assert limits.chat_gap == 1.0
    assert (limits.per_group, limits.group_period) == (20, 60.0)
    assert FloodRules() == FloodRules(30, 1.0, 1.0, 20, 60.0)


async def test_a_send_waiting_at_stop_is_kept_by_the_outbox_and_sent_later(
    fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    def clock() -> datetime:
        return datetime.now(UTC)

    def outbox_of(channel: TelegramChannel) -> Outbox:
        return Outbox(db, {"telegram": channel}, clock, backoff=Backoff(first=0.001, cap=0.001))

    slow = FloodLimits(chat_gap=60.0)  # the second message's turn is a minute away
    channel = TelegramChannel(TOKEN, fake.url, webhook_url=HOOK, limits=slow)
    outbox = outbox_of(channel)
    await channel.start(_ignore)
    try:
        await outbox.enqueue(_msg(7200, "one"))
        second = asyncio.create_task(outbox.enqueue(_msg(7200, "two")))
        # Stored as sending: from here it goes straight to wait for the chat's turn.
        await until_async(lambda: db["outbox"].find_one({"text": "two", "status": "sending"}))
        await channel.stop()
        async with asyncio.timeout(10):  # at the stop, not a minute later
            await second
    finally:
        await channel.stop()
    row = await db["outbox"].find_one({"text": "two"})
    assert row is not None and row["status"] == "pending"
    assert "stopped before its turn" in row["last_error"]
    assert [s.text for s in _in(fake, 7200)] == ["one"]
    restarted = TelegramChannel(TOKEN, fake.url, webhook_url=HOOK)  # the next process
    await restarted.start(_ignore)
    try:
        await outbox_of(restarted).run_due()
    finally:
        await restarted.stop()
    assert [s.text for s in _in(fake, 7200)] == ["one", "two"]


async def test_a_cancelled_send_frees_the_chat_for_the_next(bot: Any, fake: FakeTelegram) -> None:
    channel: TelegramChannel = await bot(FloodLimits(chat_gap=0.5))
    await channel.send(_msg(7300, "one"))
    waiting = asyncio.create_task(channel.send(_msg(7300, "cancelled")))
    after = asyncio.create_task(channel.send(_msg(7300, "three")))
    await asyncio.sleep(0)
    waiting.cancel()
    await after
    chat = _in(fake, 7300)
    assert [s.text for s in chat] == ["one", "three"] and fake.refusals == []
    assert waiting.cancelled()


async def test_due_messages_go_chat_by_chat_and_a_waiting_chat_holds_up_no_other(
    bot: Any, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    channel: TelegramChannel = await bot()
    outbox = Outbox(db, {"telegram": channel}, lambda: datetime.now(UTC))
    for text in ("a1", "a2", "a3"):
        await outbox.enqueue(_msg(7400, text), send_now=False)
    await outbox.enqueue(_msg(7401, "b1"), send_now=False)  # queued last
    assert await outbox.run_due() == 4
    assert fake.refusals == []
    slow = _in(fake, 7400)
    assert [s.text for s in slow] == ["a1", "a2", "a3"]
    [other] = _in(fake, 7401)
    assert other.at < slow[1].at  # not behind the chat that waits its second


# -- the pace itself ---------------------------------------------------------------------
async def test_a_window_counts_from_the_answer_and_gives_back_refusals() -> None:
    window = Window(1, 0.2)
    await window.acquire()
    window.release(counted=False)  # refused: nothing delivered, the place is free at once
    await window.acquire()
    # By the window's own clock: uvloop's ``loop.time()`` is whole milliseconds, and
    # 0.2 s of them came out as 0.19999999999708962 (43144.572 - 43144.372).
    answered = time.monotonic()
    window.release()
    await window.acquire()
    assert time.monotonic() - answered >= 0.2
    window.release(counted=False)


async def test_a_place_and_a_gap_last_their_whole_time_by_a_fine_clock() -> None:
    """The service times arrivals by a fine clock, so the pace must too: uvloop's
    ``loop.time()`` ticks in whole milliseconds and is read once per turn of the loop,
    and a pace timed by it let a send go a fraction of a millisecond early (the bench
    met a 429 for a send 0.9999 s after the 30th before it)."""
    window, lane = Window(1, 0.05), Pace().lane("7")
    waits: list[float] = []
    await window.acquire()
    for _ in range(10):
        answered = time.monotonic()
        window.release()
        await window.acquire()
        waits.append(time.monotonic() - answered)
    window.release(counted=False)
    async with lane:
        await lane.turn()
        for _ in range(10):
            answered = time.monotonic()
            lane.done(0.05)
            await lane.turn()
            waits.append(time.monotonic() - answered)
        lane.done(0.0)
    assert min(waits) >= 0.05, waits


async def test_a_cancelled_waiter_passes_its_place_on_and_close_fails_the_rest() -> None:
    window = Window(1, 60.0)
    await window.acquire()
    cancelled = asyncio.create_task(window.acquire())
    nxt = asyncio.create_task(window.acquire())
    last = asyncio.create_task(window.acquire())
    await asyncio.sleep(0)
    cancelled.cancel()
    window.release(counted=False)
    await nxt  # the place skipped the cancelled waiter
    window.close()
    with pytest.raises(PacingClosed):
        await last
    with pytest.raises(PacingClosed):
        await window.acquire()


async def test_a_lane_is_held_in_arrival_order_and_a_cancelled_waiter_passes() -> None:
    """One chat's sends hold its lane one at a time, first come first served; a sender
    cancelled while waiting, or just as the lane was handed to it, loses nobody their
    turn, and the lane is free again once the last one leaves."""
    pace = Pace()
    lane = pace.lane("42")
    order: list[str] = []
    release = asyncio.Event()

    waiting: list[asyncio.Task[None]] = []

    async def send(name: str) -> None:
        async with lane:
            order.append(name)
            await release.wait()
        if name == "first":  # the lane is "handed"'s now: cancelled before it runs
            waiting[1].cancel()

    first = asyncio.create_task(send("first"))
    await until(lambda: order == ["first"], "the free lane held at once")
    waiting += [asyncio.create_task(send(name)) for name in ("gone", "handed", "next", "last")]
    await asyncio.sleep(0)
    waiting[0].cancel()  # cancelled while it waits
    release.set()
    await first
    await asyncio.gather(*waiting, return_exceptions=True)
    assert order == ["first", "next", "last"] and lane.users == 0
    async with lane:  # free again: held at once
        order.append("again")
    assert order[-1] == "again" and lane.idle(asyncio.get_running_loop().time())


async def test_destinations_gone_quiet_are_forgotten() -> None:
    pace = Pace()
    for chat in range(1000):
        async with pace.lane(str(chat)) as lane:
            await lane.turn()
            lane.done(0.0)
    assert pace.tracked <= 2 * Pace.SWEEP_FROM


# -- Twilio -----------------------------------------------------------------------------
async def test_sms_segments_are_paced_per_sending_number() -> None:
    async with FakeTwilio() as twilio:
        twilio.segment_pacing = True
        channel = SmsChannel(
            twilio.account_sid, twilio.auth_token, FROM_NUMBER, api_base_url=twilio.url
        )
        await channel.start(_ignore)
        bodies = ["long " * 40, "short one", "short two"]  # 200 GSM-7 characters: 2 segments
        try:
            results = await asyncio.gather(
                *(
                    channel.send(OutboundMessage("sms", "+15550001111", b, f"s{i}"))
                    for i, b in enumerate(bodies)
                ),
                return_exceptions=True,
            )
        finally:
            await channel.stop()
    assert not [r for r in results if isinstance(r, SendError)] and twilio.refusals == []
    assert [s.body for s in twilio.sent] == bodies
    assert [s.segments for s in twilio.sent] == [2, 1, 1]
    first, second, third = (s.at for s in twilio.sent)
    assert second - first >= 2.0 and third - second >= 1.0
