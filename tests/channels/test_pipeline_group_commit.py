"""Under a burst the pipeline and outbox share database commands (storage.coalesce),
and every message is still stored, answered, recorded sent and marked done. A send's
"sent" mark is the one write that is never shared (``channels.delivery.outbox``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, Reply
from tests.fakes.channel import RecordingChannel
from tests.fakes.commands import Commands
from tests.fakes.fixtures import watched

Doc = dict[str, Any]
__all__ = ["watched"]  # a fixture, imported for pytest
CHATS = 30


def now() -> datetime:
    return datetime.now(UTC)


def inbound(chat: str, n: int) -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=f"{chat}-{n}", chat_id=chat, sender_id="u",
        text=f"{chat} message {n}", received_at=now(),
    )  # fmt: skip


async def test_replies_finishing_together_share_their_writes(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    answer = asyncio.Event()

    async def handler(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        await answer.wait()  # every model answer arrives at once
        return [Reply(f"re: {message.text}")]

    channel = RecordingChannel("rec")
    outbox = Outbox(db, {"rec": channel}, now)
    pipeline = Pipeline(db, handler, outbox, {"rec": channel}, now)
    for n in range(CHATS):
        assert await pipeline.submit(inbound(f"c{n}", 0))
    commands.counts.clear()
    answer.set()
    await pipeline.join()

    assert sorted(channel.texts()) == sorted(f"re: c{n} message 0" for n in range(CHATS))
    assert await db["inbox"].count_documents({"status": "done"}) == CHATS
    sent = await db["outbox"].find({"status": "sent"}).to_list()
    assert len(sent) == CHATS and all(d["external_ids"] for d in sent)
    assert commands.counts["insert outbox"] <= CHATS // 3, commands.counts
    # The "done" marks follow each reply's own "sent" write, so they arrive spread over
    # those 30 writes rather than at one moment: still shared (10 to 13 commands seen
    # here for 30 marks), never one each.
    assert commands.counts["update inbox"] <= CHATS // 2, commands.counts
    # Each "sent" mark goes alone, at once: a crash cuts off at most the one being written.
    assert commands.counts["update outbox"] == CHATS, commands.counts


async def test_messages_stored_at_once_are_one_insert_each_heard_once_in_order(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    handled: list[str] = []

    async def handler(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        handled.append(message.external_id)
        return [Reply("ok")]

    channel = RecordingChannel("rec")
    pipeline = Pipeline(db, handler, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    messages = [inbound(chat, n) for n in range(5) for chat in ("a", "b", "c", "d", "e", "f")]
    messages.insert(7, inbound("a", 0))  # a webhook delivered twice at once
    stored = await asyncio.gather(*(pipeline.submit(m) for m in messages))
    assert stored == [True] * 7 + [False] + [True] * 23
    assert commands.counts["insert inbox"] <= 3, commands.counts
    await pipeline.join()
    for chat in "abcdef":
        assert [i for i in handled if i.startswith(chat)] == [f"{chat}-{n}" for n in range(5)]
    assert await db["inbox"].count_documents({"status": "done"}) == 30
