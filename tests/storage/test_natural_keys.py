"""Inbox and outbox rows keyed by ``_id`` (``storage.collections``): a message is
stored once and a send enqueued once without a unique index, and a store written by
an earlier version (random ``_id``s, the old unique indexes) keeps both promises
across the upgrade. A message delivered twice at once: ``tests/channels/test_pipeline.py``."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bson import ObjectId
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, OutboundMessage, Reply
from storage import collections as c
from storage.coalesce import insert_each
from storage.collections import LEGACY_INBOX_INDEX, LEGACY_OUTBOX_INDEX, inbox_key
from storage.db import open_database
from storage.retry import INSERT_FIELD
from tests.fakes.channel import RecordingChannel
from tests.fakes.unheard_close import UnheardCloseRelay

Doc = dict[str, Any]
NOW = datetime.now(UTC)


def clock() -> datetime:
    return NOW


def message(external_id: str, received_at: datetime = NOW) -> InboundMessage:
    return InboundMessage(
        channel="rec", external_id=external_id, chat_id="chat", sender_id="owner",
        text=f"text of {external_id}", received_at=received_at,
    )  # fmt: skip


def test_an_inbox_key_is_its_channel_and_message_id() -> None:
    assert inbox_key("telegram", "42") == inbox_key("telegram", "42")
    assert inbox_key("telegram", "42") != inbox_key("whatsapp", "42")
    assert inbox_key("a", "b\x00c") != inbox_key("a\x00b", "c")
    assert isinstance(inbox_key("sms", "\ud800"), ObjectId)  # a lone surrogate still hashes


async def test_a_keyed_batch_tells_its_own_earlier_copy_from_another_document(
    db: AsyncDatabase[Doc],
) -> None:
    coll = db[f"keyed_{uuid.uuid4().hex[:8]}"]
    write = insert_each(coll, keyed=True)
    first = {"_id": "k1", "text": "first"}
    assert await write([first]) is None
    # The same document again (a batch tried once more): its own copy, so stored.
    assert await write([first]) in (None, [None])
    # Another document with that key, and two with one key in the same batch.
    outcomes = await write([{"_id": "k1", "text": "again"}, {"_id": "k2"}, {"_id": "k2"}])
    assert outcomes is not None
    assert [type(o) for o in outcomes] == [DuplicateKeyError, type(None), DuplicateKeyError]
    stored = {d["_id"]: d async for d in coll.find({})}
    assert stored["k1"]["text"] == "first" and stored["k1"][INSERT_FIELD] == first[INSERT_FIELD]
    assert set(stored) == {"k1", "k2"}


async def test_a_keyed_insert_after_a_dropped_connection_still_refuses_another_document(
    bare_client: AsyncMongoClient[Doc], relay: UnheardCloseRelay
) -> None:
    coll = bare_client["quiet"][f"k_{uuid.uuid4().hex[:8]}"]
    await coll.insert_one({"_id": "taken", INSERT_FIELD: ObjectId()})  # another writer's
    await asyncio.gather(*(coll.insert_one({"warm": i}) for i in range(4)))
    await relay.quiet()  # the server has closed the pooled connections
    outcomes = await insert_each(coll, keyed=True)([{"_id": "taken"}, {"_id": "free"}])
    assert outcomes is not None and [type(o) for o in outcomes] == [
        DuplicateKeyError,
        type(None),
    ]


def legacy_outbox_row(key: str, at: datetime, status: str = "sent") -> Doc:
    return {
        "_id": ObjectId.from_datetime(at), "idempotency_key": key, "channel": "rec",
        "chat_id": "chat", "text": f"sent as {key}", "status": status, "meta": {},
        "created_at": at, "next_attempt_at": at, "attempts": 1,
    }  # fmt: skip


async def _write_as_an_earlier_version(db: AsyncDatabase[Doc]) -> None:
    """The old unique indexes and rows with random ids: two recent sends, one old one,
    and a message received an hour ago."""
    await db[c.OUTBOX].create_index("idempotency_key", unique=True)
    await db[c.INBOX].create_index([("channel", 1), ("external_id", 1)], unique=True)
    await db[c.OUTBOX].insert_many(
        [
            legacy_outbox_row("alert:A1:sms:0", NOW - timedelta(hours=2)),
            legacy_outbox_row("alert:A1:sms:1", NOW - timedelta(minutes=5), status="pending"),
            legacy_outbox_row("old:1", NOW - timedelta(days=10)),
        ]
    )
    await db[c.INBOX].insert_one(
        {
            "_id": ObjectId.from_datetime(NOW - timedelta(hours=1)), "channel": "rec",
            "external_id": "m1", "chat_id": "chat", "text": "hello", "status": "done",
            "received_at": NOW - timedelta(hours=1),
        }
    )  # fmt: skip


async def test_an_upgraded_store_still_sends_once_and_stores_each_message_once(
    mongo_server: str, tmp_path: Path
) -> None:
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    async with open_database(mongo_server, name, tmp_path) as database:
        await _write_as_an_earlier_version(database.db)

    async with open_database(mongo_server, name, tmp_path) as database:
        db = database.db
        outbox_rows = {d["idempotency_key"]: d async for d in db[c.OUTBOX].find({})}
        # Recent sends now answer to their key; the old one is left as it was.
        assert outbox_rows["alert:A1:sms:0"]["_id"] == "alert:A1:sms:0"
        assert outbox_rows["alert:A1:sms:1"]["_id"] == "alert:A1:sms:1"
        assert outbox_rows["alert:A1:sms:1"]["status"] == "pending"  # nothing else changed
        assert outbox_rows["alert:A1:sms:0"]["text"] == "sent as alert:A1:sms:0"
        assert isinstance(outbox_rows["old:1"]["_id"], ObjectId) and len(outbox_rows) == 3
        assert LEGACY_OUTBOX_INDEX not in await db[c.OUTBOX].index_information()

        channel = RecordingChannel("rec")
        outbox = Outbox(db, {"rec": channel}, clock)
        again = OutboundMessage(
            channel="rec", chat_id="chat", text="page again", idempotency_key="alert:A1:sms:0"
        )
        assert await outbox.enqueue(again) is False  # sent before the upgrade: not again
        assert channel.sent == []

        # The message received before the upgrade is still refused if delivered again.
        assert LEGACY_INBOX_INDEX in await db[c.INBOX].index_information()
        handled: list[str] = []

        async def handler(envelope: Envelope) -> list[Reply]:
            m = envelope.message
            handled.append(m.external_id)
            return []

        pipeline = Pipeline(db, handler, outbox, {"rec": channel}, clock)
        assert await pipeline.submit(message("m1", NOW - timedelta(hours=1))) is False
        assert await pipeline.submit(message("m2")) is True
        await pipeline.join()
        await pipeline.stop()
        assert handled == ["m2"]
        # A week on, no recent message has an old-style id: the old index goes.
        await db[c.INBOX].update_one(
            {"external_id": "m1"}, {"$set": {"received_at": NOW - timedelta(days=8)}}
        )

    async with open_database(mongo_server, name, tmp_path) as database:
        names = set(await database.db[c.INBOX].index_information())
        assert LEGACY_INBOX_INDEX not in names and "status_1_received_at_1" in names
        assert await database.db[c.INBOX].count_documents({}) == 2


async def test_a_start_that_stopped_half_way_through_rekeying_is_finished_by_the_next(
    mongo_server: str, tmp_path: Path
) -> None:
    name = f"halfway_{uuid.uuid4().hex[:8]}"
    row = legacy_outbox_row("reply:1", NOW - timedelta(minutes=1))
    async with open_database(mongo_server, name, tmp_path) as database:
        # Copied under its key, the original not yet removed, the old index gone.
        await database.db[c.OUTBOX].insert_many([row, {**row, "_id": "reply:1"}])

    async with open_database(mongo_server, name, tmp_path) as database:
        rows = [d async for d in database.db[c.OUTBOX].find({})]
        assert [d["_id"] for d in rows] == ["reply:1"] and rows[0]["text"] == "sent as reply:1"


async def test_a_new_store_has_no_unique_index_but_its_ids(
    mongo_server: str, tmp_path: Path
) -> None:
    async with open_database(mongo_server, f"new_{uuid.uuid4().hex[:8]}", tmp_path) as database:
        for name in (c.INBOX, c.OUTBOX):
            info = await database.db[name].index_information()
            assert not [n for n, spec in info.items() if spec.get("unique")], name
