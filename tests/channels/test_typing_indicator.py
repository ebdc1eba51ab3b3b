"""The typing indicator: none for a quick reply, then at most one action per chat per
interval, shared by consecutive messages; and the media flag the pipeline passes on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, MediaItem, Reply
from channels.typing_indicator import TypingIndicator
from tests.fakes.channel import RecordingChannel

Doc = dict[str, Any]


def now() -> datetime:
    return datetime.now(UTC)


def inbound(chat: str, n: int, media: tuple[MediaItem, ...] = ()) -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=f"{chat}-{n}", chat_id=chat, sender_id="u",
        text=f"{chat} message {n}", received_at=now(), media=media,
    )  # fmt: skip


def slow_pipeline(
    db: AsyncDatabase[Doc], channel: RecordingChannel, seconds: float, seen: list[InboundMessage]
) -> Pipeline:
    async def handler(message: InboundMessage) -> list[Reply]:
        seen.append(message)
        await asyncio.sleep(seconds)
        return [Reply("ok")]

    channels = {"rec": channel}
    pipeline = Pipeline(db, handler, Outbox(db, channels, now), channels, now)
    pipeline.typing.after, pipeline.typing.every = 0.1, 0.3
    return pipeline


async def test_a_quick_reply_shows_no_typing(db: AsyncDatabase[Doc]) -> None:
    channel, seen = RecordingChannel("rec"), list[InboundMessage]()
    pipeline = slow_pipeline(db, channel, 0.0, seen)
    for n in range(3):
        await pipeline.submit(inbound("a", n))
    await pipeline.join()
    typing = [t for t in asyncio.all_tasks() if "keep_typing" in repr(t.get_coro())]
    assert typing == []  # every indicator ended with its reply: none can type later
    assert len(channel.sent) == 3
    assert channel.typing_in == []


async def test_a_slow_reply_types_once_per_interval(db: AsyncDatabase[Doc]) -> None:
    channel, seen = RecordingChannel("rec"), list[InboundMessage]()
    pipeline = slow_pipeline(db, channel, 0.8, seen)
    pipeline.typing.every = 0.5
    await pipeline.submit(inbound("a", 0))
    await pipeline.join()
    # Typing at 0.1 s and 0.6 s; the reply comes at 0.8 s, before a third at 1.1 s.
    assert channel.typing_in == ["a", "a"]


async def test_consecutive_messages_of_a_chat_share_the_interval(db: AsyncDatabase[Doc]) -> None:
    channel, seen = RecordingChannel("rec"), list[InboundMessage]()
    pipeline = slow_pipeline(db, channel, 0.15, seen)
    pipeline.typing.every = 10.0
    for n in range(4):
        await pipeline.submit(inbound("a", n))
    await pipeline.submit(inbound("b", 0))
    await pipeline.join()
    assert len(channel.sent) == 5
    # Four slow messages in chat "a" (each past ``after``): one action; "b" its own.
    assert sorted(channel.typing_in) == ["a", "b"]


async def test_an_unknown_channel_types_nothing() -> None:
    indicator = TypingIndicator({}, after=0.0)
    await asyncio.wait_for(indicator.keep_typing("nowhere", "1"), 1.0)


async def test_the_pipeline_tells_the_handler_whether_media_is_stored(
    db: AsyncDatabase[Doc],
) -> None:
    channel, seen = RecordingChannel("rec"), list[InboundMessage]()
    pipeline = slow_pipeline(db, channel, 0.0, seen)
    photo = MediaItem(kind="image", mime="image/jpeg", source={"file_id": "f"})
    await pipeline.submit(inbound("a", 0))
    await pipeline.submit(inbound("b", 0, media=(photo,)))
    await pipeline.join()
    flags = {m.chat_id: m.has_media for m in seen}
    assert flags == {"a": False, "b": True}
    stored = await db["inbox"].find_one({"external_id": "b-0"})
    assert stored is not None and stored["media"][0]["status"] == "pending"
