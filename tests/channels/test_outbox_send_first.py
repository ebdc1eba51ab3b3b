"""A reply its handler would give again unchanged (``Reply.replayable``) is sent before
it is stored, and stored once, as sent; every other reply is still stored first.

On a real database with a recording channel that looks at the outbox while it sends.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import (
    Button,
    HandlingFailed,
    InboundMessage,
    OutboundMessage,
    Reply,
    SendError,
    SendResult,
)
from runtime.backoff import Backoff
from storage.repos.outbox_row import OutboxRow
from tests.fakes.channel import RecordingChannel
from tests.fakes.commands import Commands
from tests.fakes.fixtures import watched

Doc = dict[str, Any]
__all__ = ["watched"]  # a fixture, imported for pytest


def now() -> datetime:
    return datetime.now(UTC)


def inbound(chat: str, n: int = 0) -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=f"{chat}-{n}", chat_id=chat, sender_id="u",
        text=f"{chat} message {n}", received_at=now(),
    )  # fmt: skip


class Witness(RecordingChannel):
    """Notes, at each send, what the outbox already held under the message's key."""

    def __init__(self, db: AsyncDatabase[Doc], **kwargs: Any) -> None:
        super().__init__("rec", **kwargs)
        self.db = db
        self.stored_at_send: list[Doc | None] = []

    async def send(self, message: OutboundMessage) -> SendResult:
        found = await self.db["outbox"].find_one({"_id": message.idempotency_key})
        self.stored_at_send.append(found)
        return await super().send(message)


async def test_the_agents_answer_is_sent_then_stored_in_one_write(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    channel = Witness(db)

    async def agent(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        return [Reply(f"re: {message.text}", replayable=True)]

    pipeline = Pipeline(db, agent, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    commands.counts.clear()
    assert await pipeline.submit(inbound("a"))
    await pipeline.join()

    assert channel.texts() == ["re: a message 0"]
    assert channel.stored_at_send == [None]  # nothing written before the send
    [doc] = await db["outbox"].find().to_list()
    assert doc["status"] == "sent" and doc["external_ids"] == ["1"] and doc["attempts"] == 1
    assert doc["text"] == "re: a message 0" and doc["chat_id"] == "a"
    assert commands.counts["insert outbox"] == 1 and commands.counts["update outbox"] == 0


async def test_other_replies_are_stored_before_they_are_sent(db: AsyncDatabase[Doc]) -> None:
    channel = Witness(db)

    async def command(envelope: Envelope) -> list[Reply]:
        return [Reply("done: alert acknowledged")]  # applied already: not to be redone

    pipeline = Pipeline(db, command, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    await pipeline.submit(inbound("a"))
    await pipeline.join()

    [stored] = channel.stored_at_send
    assert stored is not None and stored["status"] == "sending"
    assert await db["outbox"].count_documents({"status": "sent"}) == 1


async def test_an_apology_is_stored_first_even_when_marked_replayable(
    db: AsyncDatabase[Doc],
) -> None:
    channel = Witness(db)

    async def failing(envelope: Envelope) -> list[Reply]:
        raise HandlingFailed("model_unavailable", [Reply("Sorry, try again", replayable=True)])

    pipeline = Pipeline(db, failing, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    await pipeline.submit(inbound("a"))
    await pipeline.join()

    [stored] = channel.stored_at_send
    assert stored is not None and channel.texts() == ["Sorry, try again"]


async def test_a_failed_send_is_stored_due_again_and_the_retry_loop_sends_it(
    db: AsyncDatabase[Doc],
) -> None:
    channel = RecordingChannel("rec", failures=[SendError("HTTP 502", retryable=True)])
    outbox = Outbox(
        db, {"rec": channel}, now, backoff=Backoff(first=0.2, cap=0.2, retries=1), poll_seconds=30
    )
    await outbox.start()
    try:
        before = now()
        await outbox.send_then_record(OutboundMessage("rec", "a", "hello", "k1"))
        doc = await db["outbox"].find_one({"_id": "k1"})
        assert doc is not None and doc["status"] == "pending" and doc["last_error"] == "HTTP 502"
        assert doc["attempts"] == 1 and doc["text"] == "hello"
        # Due after the delay (BSON keeps milliseconds).
        assert doc["next_attempt_at"] >= before + timedelta(seconds=0.199)
        assert channel.sent == []
        # Woken when it falls due, not at the 30 s poll.
        await asyncio.wait_for(channel.delivered.wait(), 5)
        # Its "sent" mark is written right after the send returns: no event to wait on.
        sent = {"_id": "k1", "status": "sent"}
        async with asyncio.timeout(5):
            while await db["outbox"].find_one(sent) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        await outbox.stop()
    assert channel.texts() == ["hello"]
    doc = await db["outbox"].find_one({"_id": "k1"})
    assert doc is not None and doc["attempts"] == 2


async def test_a_send_refused_for_good_is_stored_failed_and_reported(
    db: AsyncDatabase[Doc],
) -> None:
    reported: list[OutboxRow] = []

    async def on_failure(row: OutboxRow) -> None:
        reported.append(row)

    blocked = SendError("Forbidden: bot was blocked by the user", retryable=False)
    channel = RecordingChannel("rec", failures=[blocked])
    outbox = Outbox(db, {"rec": channel}, now, on_failure=on_failure)
    await outbox.send_then_record(OutboundMessage("rec", "a", "hello", "k2"))

    doc = await db["outbox"].find_one({"_id": "k2"})
    assert doc is not None and doc["status"] == "failed"
    assert doc["last_error"] == "Forbidden: bot was blocked by the user"
    assert [(r.idempotency_key, r.status) for r in reported] == [("k2", "failed")]


async def test_a_channel_that_breaks_unexpectedly_leaves_the_reply_due_again(
    db: AsyncDatabase[Doc],
) -> None:
    clock = [now()]
    channel = RecordingChannel("rec", failures=[RuntimeError("bug in a channel")])
    outbox = Outbox(db, {"rec": channel}, lambda: clock[0])
    await outbox.send_then_record(OutboundMessage("rec", "a", "hello", "k3"))

    doc = await db["outbox"].find_one({"_id": "k3"})
    assert doc is not None and doc["status"] == "pending" and doc["last_error"] == "RuntimeError"
    assert await outbox.run_due() == 0  # not due yet
    clock[0] += timedelta(seconds=5)
    assert await outbox.run_due() == 1
    assert channel.texts() == ["hello"]


async def test_each_answer_is_recorded_by_its_own_write_and_done_marks_share(
    watched: tuple[AsyncDatabase[Doc], Commands],
) -> None:
    db, commands = watched
    channel = RecordingChannel("rec")
    chats = 30
    all_in = asyncio.Event()

    async def agent(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        n = int(message.chat_id[1:])
        await all_in.wait()  # every chat asked, however long the submits took
        await asyncio.sleep(0.004 * n)  # the model's answers come 4 ms apart
        return [Reply(f"re: {message.text}", replayable=True)]

    pipeline = Pipeline(db, agent, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    for n in range(chats):
        assert await pipeline.submit(inbound(f"c{n}"))
    commands.counts.clear()
    all_in.set()
    await pipeline.join()

    assert sorted(channel.texts()) == sorted(f"re: c{n} message 0" for n in range(chats))
    assert await db["outbox"].count_documents({"status": "sent"}) == chats
    assert await db["inbox"].count_documents({"status": "done"}) == chats
    # A sent answer's record is its own command, at once: a crash can cut off only the
    # record being written, never a batch waiting for company. "Done" marks (no reply
    # hangs on them) still wait for company while others are at work (30 ms).
    assert commands.counts["insert outbox"] == chats, commands.counts
    assert commands.counts["update inbox"] <= chats * 2 // 3, commands.counts


async def test_the_replies_given_up_on_are_read_as_rows_and_a_damaged_one_skipped(
    db: AsyncDatabase[Doc],
) -> None:
    """``failed`` gives records with the stored reason; a row a hand damaged is skipped."""
    blocked = SendError("Forbidden: bot was blocked by the user", retryable=False)
    channel = RecordingChannel("rec", failures=[blocked])
    outbox = Outbox(db, {"rec": channel}, now)
    buttons = (Button("Yes", "y"),)
    await outbox.send_then_record(OutboundMessage("rec", "a", "hello", "k4", buttons=buttons))
    await db["outbox"].insert_one({"_id": "bad", "status": "failed", "attempts": "many"})

    [row] = await outbox.failed()
    assert (row.idempotency_key, row.chat_id, row.text) == ("k4", "a", "hello")
    assert row.last_error == "Forbidden: bot was blocked by the user"
    assert row.buttons == (("Yes", "y"),) and row.status == "failed"
