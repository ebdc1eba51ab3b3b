"""The shared pipeline and outbox with a recording channel, on a real database."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, OutboundMessage, Reply, SendError
from runtime.backoff import Backoff
from storage.collections import inbox_key
from storage.repos.outbox_row import OutboxRow
from tests.fakes.channel import RecordingChannel
from tests.waiting import until, until_async, waiting_in

Doc = dict[str, Any]


def now() -> datetime:
    return datetime.now(UTC)


def inbound(chat: str, n: int) -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=f"{chat}-{n}", chat_id=chat, sender_id="u",
        text=f"{chat} message {n}", received_at=now(),
    )  # fmt: skip


async def test_one_conversation_in_order_many_in_parallel(db: AsyncDatabase[Doc]) -> None:
    running: set[str] = set()
    peak = 0
    go = asyncio.Event()

    async def handler(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        nonlocal peak
        assert message.chat_id not in running, "two messages of one chat at once"
        running.add(message.chat_id)
        peak = max(peak, len(running))
        await go.wait()  # held until the test has seen who runs and who waits
        running.discard(message.chat_id)
        return [Reply(message.text)]

    channel = RecordingChannel("rec")
    outbox = Outbox(db, {"rec": channel}, now)
    pipeline = Pipeline(db, handler, outbox, {"rec": channel}, now, max_concurrency=3)
    for n in range(5):
        for chat in ("a", "b", "c", "d", "e"):
            assert await pipeline.submit(inbound(chat, n))
    # Every chat's first message is either being handled or waiting for a place.
    await until(lambda: len(running) + waiting_in("Semaphore.acquire") == 5, "all placed")
    assert len(running) == 3
    go.set()
    await pipeline.join()
    for chat in ("a", "b", "c", "d", "e"):
        texts = [m.text for m in channel.sent if m.chat_id == chat]
        assert texts == [f"{chat} message {n}" for n in range(5)]
    assert peak == 3  # parallel across chats, bounded by max_concurrency


async def test_a_duplicate_delivery_is_handled_once(db: AsyncDatabase[Doc]) -> None:
    calls: list[str] = []

    async def handler(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        calls.append(message.external_id)
        return [Reply("ok")]

    channel = RecordingChannel("rec")
    outbox = Outbox(db, {"rec": channel}, now)
    pipeline = Pipeline(db, handler, outbox, {"rec": channel}, now)
    assert await pipeline.submit(inbound("a", 1))
    assert not await pipeline.submit(inbound("a", 1))
    # Twice at once: both in one inbox write (storage.coalesce), one stored.
    both = await asyncio.gather(*(pipeline.submit(inbound("a", 2)) for _ in range(2)))
    await pipeline.join()
    assert sorted(both) == [False, True]
    assert calls == ["a-1", "a-2"] and len(channel.sent) == 2
    # Stored under its key (storage.collections), its reply under the row's id.
    row = await db["inbox"].find_one({"_id": inbox_key("rec", "a-2")})
    assert row is not None and row["external_id"] == "a-2"
    assert await db["outbox"].count_documents({"_id": f"{row['_id']}:0"}) == 1


async def test_retry_waits_as_long_as_the_service_asked(db: AsyncDatabase[Doc]) -> None:
    slow_down = SendError("slow down", retryable=True, retry_after=0.4)
    channel = RecordingChannel("rec", failures=[slow_down])
    outbox = Outbox(
        db, {"rec": channel}, now, backoff=Backoff(first=0.01, cap=0.01, retries=2), poll_seconds=30
    )
    await outbox.start()
    try:
        await outbox.enqueue(OutboundMessage("rec", "a", "hello", "k1"))
        # Not at the next 30 s poll: woken when the retry falls due.
        await until_async(lambda: _sent(db, "k1"), "the retry sent", within=20)
    finally:
        await outbox.stop()
    doc = await db["outbox"].find_one({"_id": "k1"})
    assert doc is not None and doc["attempts"] == 2
    # Not before Telegram's retry-after: the outbox's own records, exact to the ms.
    assert doc["sent_at"] >= doc["created_at"] + timedelta(seconds=0.4)


async def _sent(db: AsyncDatabase[Doc], key: str) -> bool:
    return await db["outbox"].count_documents({"_id": key, "status": "sent"}) == 1


async def test_a_reply_that_finally_fails_is_kept_and_reported(db: AsyncDatabase[Doc]) -> None:
    reported: list[OutboxRow] = []
    gave_up = asyncio.Event()

    async def on_failure(row: OutboxRow) -> None:
        reported.append(row)
        gave_up.set()

    failures = [SendError("HTTP 500", retryable=True)] * 2 + [SendError("blocked", retryable=False)]
    channel = RecordingChannel("rec", failures=failures)
    outbox = Outbox(
        db,
        {"rec": channel},
        now,
        backoff=Backoff(first=0.01, cap=0.01, retries=3),
        on_failure=on_failure,
    )
    await outbox.start()
    try:
        await outbox.enqueue(OutboundMessage("rec", "a", "important", "k2"))
        await asyncio.wait_for(gave_up.wait(), 5)
    finally:
        await outbox.stop()
    doc = await db["outbox"].find_one({"idempotency_key": "k2"})
    assert doc is not None and doc["status"] == "failed" and doc["last_error"] == "blocked"
    assert doc["attempts"] == 3 and doc["text"] == "important"
    assert [r.idempotency_key for r in reported] == ["k2"]


async def test_a_second_instance_leaves_fresh_work_alone(db: AsyncDatabase[Doc]) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(envelope: Envelope) -> list[Reply]:
        started.set()
        await release.wait()
        return [Reply("first instance")]

    async def other(envelope: Envelope) -> list[Reply]:
        return [Reply("second instance")]

    channel = RecordingChannel("rec")
    first = Pipeline(db, slow, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    await first.submit(inbound("a", 1))
    await started.wait()
    second = Pipeline(db, other, Outbox(db, {"rec": channel}, now), {"rec": channel}, now)
    assert await second.recover() == 0  # the message is fresh and claimed by `first`
    release.set()
    await first.join()
    assert [m.text for m in channel.sent] == ["first instance"]


async def test_a_claim_gone_stale_after_start_is_picked_up_without_a_restart(
    db: AsyncDatabase[Doc],
) -> None:
    """Sharing the database (not its sole owner), a process that died minutes before this
    one started left its claim fresh at our start; once stale, it is handled here, not
    left until some later restart."""
    moment = [now()]

    def clock() -> datetime:
        return moment[0]

    async def answer(envelope: Envelope) -> list[Reply]:
        return [Reply(f"answered: {envelope.message.text}")]

    orphan = inbound("a", 1)
    await db["inbox"].insert_one({
        "_id": inbox_key("rec", orphan.external_id), "channel": "rec",
        "external_id": orphan.external_id, "chat_id": "a", "sender_id": "u",
        "text": orphan.text, "received_at": moment[0], "conversation_key": "rec:a",
        "status": "processing", "claimed_at": moment[0], "attempts": 1,
    })  # fmt: skip
    channel = RecordingChannel("rec")
    outbox = Outbox(db, {"rec": channel}, clock)
    pipeline = Pipeline(db, answer, outbox, {"rec": channel}, clock, reclaim_every=0.01)
    try:
        assert await pipeline.recover() == 0  # claimed a moment ago: maybe still at work
        moment[0] += timedelta(minutes=16)  # the claim is stale now: its process is gone
        await until(lambda: [m.text for m in channel.sent] == ["answered: a message 1"])
        await pipeline.join()
        doc = await db["inbox"].find_one({"_id": inbox_key("rec", orphan.external_id)})
        assert doc is not None and doc["status"] == "done" and doc["attempts"] == 2
    finally:
        await pipeline.stop()
        await outbox.stop()
