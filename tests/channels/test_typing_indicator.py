"""The typing indicator: none for a quick reply, then at most one action per chat per
interval, shared by consecutive messages; and the media flag the pipeline passes on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, MediaItem, Reply
from channels.typing_indicator import TypingIndicator
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeTimers
from tests.waiting import WATCHDOG, until

Doc = dict[str, Any]


def now() -> datetime:
    return datetime.now(UTC)


def inbound(chat: str, n: int, media: tuple[MediaItem, ...] = ()) -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=f"{chat}-{n}", chat_id=chat, sender_id="u",
        text=f"{chat} message {n}", received_at=now(), media=media,
    )  # fmt: skip


AFTER, EVERY = 1.0, 5.0
"""The indicator's delays in these tests, in the fake timers' seconds."""


class Handler:
    """Answers each message once the test lets it go (``release``): a reply as slow as
    the test says, with no time guessed."""

    def __init__(self, quick: bool = False) -> None:
        self.quick = quick
        self.seen: list[Envelope] = []
        self._go: dict[str, asyncio.Event] = {}

    def release(self, *external_ids: str) -> None:
        for external_id in external_ids:
            self._go.setdefault(external_id, asyncio.Event()).set()

    def has_seen(self, *external_ids: str) -> bool:
        return {e.message.external_id for e in self.seen} >= set(external_ids)

    async def __call__(self, envelope: Envelope) -> list[Reply]:
        self.seen.append(envelope)
        message = envelope.message
        if not self.quick:
            await self._go.setdefault(message.external_id, asyncio.Event()).wait()
        return [Reply("ok")]


def pipeline_on(
    db: AsyncDatabase[Doc], channel: RecordingChannel, handler: Handler, timers: FakeTimers
) -> Pipeline:
    channels = {"rec": channel}
    indicator = TypingIndicator(
        channels, after=AFTER, every=EVERY, clock=timers, sleep=timers.sleep
    )
    outbox = Outbox(db, channels, now)
    return Pipeline(db, handler, outbox, channels, now, typing_indicator=indicator)


def typing_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if "keep_typing" in repr(t.get_coro())]


async def test_a_quick_reply_shows_no_typing(db: AsyncDatabase[Doc]) -> None:
    channel, handler, timers = RecordingChannel("rec"), Handler(quick=True), FakeTimers()
    pipeline = pipeline_on(db, channel, handler, timers)
    for n in range(3):
        await pipeline.submit(inbound("a", n))
    await pipeline.join()
    assert typing_tasks() == []  # every indicator ended with its reply: none can type later
    assert len(channel.sent) == 3
    assert channel.typing_in == []
    assert timers.due == []


async def test_a_slow_reply_types_once_per_interval(db: AsyncDatabase[Doc]) -> None:
    channel, handler, timers = RecordingChannel("rec"), Handler(), FakeTimers()
    pipeline = pipeline_on(db, channel, handler, timers)
    await pipeline.submit(inbound("a", 0))
    await until(lambda: handler.has_seen("a-0") and timers.due == [AFTER], "waiting out after")
    assert channel.typing_in == []  # nothing before ``after``
    timers.advance(AFTER)
    await until(lambda: timers.due == [AFTER + EVERY], "typed, the next in an interval")
    assert channel.typing_in == ["a"]
    timers.advance(EVERY)
    await until(lambda: timers.due == [AFTER + 2 * EVERY], "typed again")
    assert channel.typing_in == ["a", "a"]
    handler.release("a-0")  # the reply, before a third interval is up
    await pipeline.join()
    assert typing_tasks() == [] and timers.due == []
    assert channel.typing_in == ["a", "a"] and len(channel.sent) == 1


async def test_consecutive_messages_of_a_chat_share_the_interval(db: AsyncDatabase[Doc]) -> None:
    channel, handler, timers = RecordingChannel("rec"), Handler(), FakeTimers()
    pipeline = pipeline_on(db, channel, handler, timers)
    for n in range(4):
        await pipeline.submit(inbound("a", n))
    await pipeline.submit(inbound("b", 0))
    await until(lambda: handler.has_seen("a-0", "b-0") and timers.due == [AFTER, AFTER])
    timers.advance(AFTER)
    await until(lambda: timers.due == [AFTER + EVERY] * 2, "each chat typed once")
    assert sorted(channel.typing_in) == ["a", "b"]
    # The next message of "a", slow too: past its own ``after``, it waits for the
    # interval "a" started rather than typing again.
    handler.release("a-0")
    await until(lambda: handler.has_seen("a-1") and len(timers.due) == 2, "a-1 handled")
    timers.advance(AFTER)
    await until(lambda: timers.due == [AFTER + EVERY] * 2, "a-1 waits for the same interval")
    assert sorted(channel.typing_in) == ["a", "b"]
    handler.release("a-1", "a-2", "a-3", "b-0")
    await pipeline.join()
    assert len(channel.sent) == 5
    assert sorted(channel.typing_in) == ["a", "b"]


async def test_an_unknown_channel_types_nothing() -> None:
    timers = FakeTimers()
    indicator = TypingIndicator({}, clock=timers, sleep=timers.sleep)
    await asyncio.wait_for(indicator.keep_typing("nowhere", "1"), WATCHDOG)
    assert timers.due == []


async def test_the_pipeline_tells_the_handler_whether_media_is_stored(
    db: AsyncDatabase[Doc],
) -> None:
    channel, handler = RecordingChannel("rec"), Handler(quick=True)
    pipeline = pipeline_on(db, channel, handler, FakeTimers())
    photo = MediaItem(kind="image", mime="image/jpeg", source={"file_id": "f"})
    await pipeline.submit(inbound("a", 0))
    await pipeline.submit(inbound("b", 0, media=(photo,)))
    await pipeline.join()
    flags = {e.message.chat_id: e.has_media for e in handler.seen}
    assert flags == {"a": False, "b": True}
    stored = await db["inbox"].find_one({"external_id": "b-0"})
    assert stored is not None and stored["media"][0]["status"] == "pending"
