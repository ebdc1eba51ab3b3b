"""Bursts are gathered by the pipeline after every message is stored, for any channel
with a burst rule: one exchange per burst, nothing held only in memory, and a crash
at any point neither loses a message nor answers one twice."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, Reply
from tests.fakes.channel import RecordingChannel
from tests.waiting import until, waiting_in

Doc = dict[str, Any]


def now() -> datetime:
    return datetime.now(UTC)


def message(chat: str, n: int, sender: str = "contact") -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=f"{chat}-{n}", chat_id=chat, sender_id=sender,
        text=f"part {n}", received_at=now(),
    )  # fmt: skip


class Kit:
    def __init__(self, db: AsyncDatabase[Doc], window: float = 0.2) -> None:
        self.db = db
        self.handled: list[InboundMessage] = []
        self.channel = RecordingChannel("rec")
        self.outbox = Outbox(db, {"rec": self.channel}, now)
        self.pipeline = self.new_pipeline(window)

    def new_pipeline(self, window: float) -> Pipeline:
        async def handler(envelope: Envelope) -> list[Reply]:
            message = envelope.message
            self.handled.append(message)
            return [Reply(f"answer to: {message.text}")]

        return Pipeline(
            self.db,
            handler,
            self.outbox,
            {"rec": self.channel},
            now,
            burst_rules={"rec": lambda m: 0.0 if m.sender_id == "owner" else window},
        )

    async def inbox(self, chat: str) -> list[Doc]:
        # In arrival order: external ids end in the message number (0-9); _id is a hash.
        return await self.db["inbox"].find({"chat_id": chat}, sort=[("external_id", 1)]).to_list()


async def test_a_burst_is_one_exchange_and_every_message_is_stored_at_once(
    db: AsyncDatabase[Doc],
) -> None:
    kit, chat = Kit(db, window=1.0), uuid.uuid4().hex  # a busy machine stays within it
    for n in range(3):
        assert await kit.pipeline.submit(message(chat, n))
        stored = await kit.inbox(chat)
        assert len(stored) == n + 1  # durable before the burst is answered
    await kit.pipeline.join()
    [handled] = kit.handled
    assert handled.text == "part 0\npart 1\npart 2"
    assert handled.meta["message_ids"] == [f"{chat}-{n}" for n in range(3)]
    stored = await kit.inbox(chat)
    assert {d["status"] for d in stored} == {"done"}
    assert kit.channel.texts() == ["answer to: part 0\npart 1\npart 2"]


async def test_messages_without_a_burst_rule_are_answered_at_once(db: AsyncDatabase[Doc]) -> None:
    kit, chat = Kit(db, window=3600.0), uuid.uuid4().hex
    await kit.pipeline.submit(message(chat, 0, sender="owner"))
    async with asyncio.timeout(30):  # watchdog: a contact's message would wait an hour
        await kit.pipeline.join()
    assert [m.text for m in kit.handled] == ["part 0"]


async def test_crash_after_the_burst_was_formed_answers_it_once_as_a_whole(
    db: AsyncDatabase[Doc],
) -> None:
    kit, chat = Kit(db), uuid.uuid4().hex

    async def dies(envelope: Envelope) -> list[Reply]:
        raise asyncio.CancelledError  # the process died before the model answered

    crashed = Pipeline(
        db, dies, kit.outbox, {"rec": kit.channel}, now, burst_rules={"rec": lambda m: 0.2}
    )
    for n in range(3):
        await crashed.submit(message(chat, n))
    await crashed.intake.updates.join()  # each with its conversation's worker
    await asyncio.gather(*crashed._workers.values(), return_exceptions=True)
    stored = await kit.inbox(chat)
    assert {d["status"] for d in stored} == {"processing"}
    assert stored[0]["burst_ids"] == [d["_id"] for d in stored]

    assert await kit.pipeline.recover(sole_owner=True) == 3
    await kit.pipeline.join()
    [handled] = kit.handled
    assert handled.text == "part 0\npart 1\npart 2"
    assert {d["status"] for d in await kit.inbox(chat)} == {"done"}
    assert kit.channel.texts() == ["answer to: part 0\npart 1\npart 2"]


async def test_crash_while_gathering_loses_nothing(db: AsyncDatabase[Doc]) -> None:
    """Stored, but the burst never formed: each message is answered on its own."""
    kit, chat = Kit(db), uuid.uuid4().hex
    crashed = kit.new_pipeline(window=30.0)
    for n in range(3):
        await crashed.submit(message(chat, n))
    await until(lambda: waiting_in("Pipeline._gather"), "the worker gathering the burst")
    await crashed.stop(grace=0.0)  # killed while waiting for the rest of the burst
    assert kit.handled == []

    recovering = kit.new_pipeline(window=0.2)
    assert await recovering.recover(sole_owner=True) == 3
    await recovering.join()
    assert sorted(m.text for m in kit.handled) == ["part 0", "part 1", "part 2"]
    assert {d["status"] for d in await kit.inbox(chat)} == {"done"}


async def test_crash_after_the_answer_was_queued_sends_nothing_twice(
    db: AsyncDatabase[Doc],
) -> None:
    kit, chat = Kit(db), uuid.uuid4().hex
    for n in range(2):
        await kit.pipeline.submit(message(chat, n))
    await kit.pipeline.join()
    # The process died after queueing the answer, before marking the burst done.
    await db["inbox"].update_many({"chat_id": chat}, {"$set": {"status": "processing"}})
    again = kit.new_pipeline(window=0.2)
    await again.recover(sole_owner=True)
    await again.join()
    assert len(kit.handled) == 1
    assert kit.channel.texts() == ["answer to: part 0\npart 1"]
    assert {d["status"] for d in await kit.inbox(chat)} == {"done"}
