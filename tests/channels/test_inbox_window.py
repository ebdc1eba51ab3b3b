"""Recent inbox rows, read a status at a time through the (status, received_at) index:
every row in the window whatever its status, none from before it, and no status the
pipeline writes is missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import HandlingFailed, InboundMessage, Reply
from storage import collections as c
from storage.repos.inbox import STATUSES, InboxRow, newest_received, received_since
from tests.fakes.channel import RecordingChannel

Doc = dict[str, Any]
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


async def test_every_row_in_the_window_and_none_before_it(db: AsyncDatabase[Doc]) -> None:
    inbox = db[c.INBOX]
    rows = [
        {"external_id": f"{status}-{age}", "status": status, "received_at": NOW - age}
        for status in STATUSES
        for age in (timedelta(seconds=10), timedelta(minutes=5))
    ]
    await inbox.insert_many([{"channel": "rec", **row} for row in rows])
    since = NOW - timedelta(minutes=1)

    found = [d["external_id"] async for d in received_since(inbox, since)]
    assert sorted(found) == sorted(f"{s}-0:00:10" for s in STATUSES)
    some = received_since(inbox, since, statuses=["done"], projection={"status": 1})
    only = [d async for d in some]
    assert [sorted(d) for d in only] == [["_id", "status"]] and only[0]["status"] == "done"


async def test_no_status_the_pipeline_writes_is_missed(db: AsyncDatabase[Doc]) -> None:
    """Handled, failed in the handler, and not storable at all: each row it leaves has
    a status ``received_since`` reads."""

    async def handler(envelope: Envelope) -> list[Reply]:
        message = envelope.message
        if message.text == "fail":
            raise HandlingFailed("the model was away", [Reply("sorry")])
        return [Reply("ok")]

    channel = RecordingChannel("rec")
    outbox = Outbox(db, {"rec": channel}, datetime.now)
    pipeline = Pipeline(db, handler, outbox, {"rec": channel}, lambda: datetime.now(UTC))
    for n, text in enumerate(["hello", "fail", "bad \ud800 surrogate", "x" * 17_000_000]):
        message = InboundMessage(
            channel="rec", external_id=str(n), chat_id="a", sender_id="u", text=text,
            received_at=datetime.now(UTC),
        )  # fmt: skip
        await pipeline.submit(message)
    await pipeline.join()

    statuses = {d["status"] async for d in db[c.INBOX].find({}, projection={"status": 1})}
    assert "done" in statuses and "failed" in statuses
    assert statuses <= set(STATUSES)
    since = datetime.now(UTC) - timedelta(minutes=1)
    assert len([d async for d in received_since(db[c.INBOX], since)]) == await db[
        c.INBOX
    ].count_documents({})


async def test_the_newest_rows_are_exact_whichever_windows_they_fall_in(
    db: AsyncDatabase[Doc],
) -> None:
    """A window at a time back from now, but the answer is what a sort of the whole inbox
    would give: recent rows, rows months old, rows stamped a little after ``now``."""
    inbox = db[c.INBOX]
    minutes = [-2, 5, 3 * 60, 2 * 1440, 40 * 1440, 400 * 1440, 900 * 1440]
    ages = [timedelta(minutes=m) for m in minutes]
    rows = [
        {"channel": "rec", "external_id": f"{who}-{n}", "sender_id": who,
         "status": STATUSES[n % len(STATUSES)], "received_at": NOW - age}
        for n, age in enumerate(ages)
        for who in ("alice", "bob")
    ]  # fmt: skip
    await inbox.insert_many(rows)

    def alice(row: InboxRow) -> bool:
        return row.sender_id == "alice"

    for limit in range(1, len(ages) + 2):
        newest = await newest_received(db, alice, limit, NOW)
        expected = [f"alice-{n}" for n in range(len(ages))][:limit]
        assert [r.external_id for r in newest] == expected, limit
    assert await newest_received(db, lambda d: False, 5, NOW) == []


async def test_a_window_may_be_open_at_either_end(db: AsyncDatabase[Doc]) -> None:
    inbox = db[c.INBOX]
    await inbox.insert_many(
        [{"external_id": str(h), "status": "done", "received_at": NOW - timedelta(hours=h)}
         for h in range(5)]
    )  # fmt: skip
    hour = timedelta(hours=1)

    async def ids(since: datetime | None, until: datetime | None) -> list[str]:
        return sorted([d["external_id"] async for d in received_since(inbox, since, until=until)])

    assert await ids(NOW - 2.5 * hour, None) == ["0", "1", "2"]
    assert await ids(None, NOW - 2.5 * hour) == ["3", "4"]
    assert await ids(NOW - 3.5 * hour, NOW - 0.5 * hour) == ["1", "2", "3"]
    assert await ids(None, None) == ["0", "1", "2", "3", "4"]


async def test_the_newest_rows_are_typed_and_a_damaged_row_is_skipped(
    db: AsyncDatabase[Doc],
) -> None:
    """The reader gets records with every field the pipeline wrote, read once at the
    store; a row an older version or a hand left damaged is skipped, not a crash."""
    inbox = db[c.INBOX]
    good = InboxRow(
        id=c.inbox_key("rec", "1"), channel="rec", external_id="1", chat_id="c",
        sender_id="alice", text="hello", received_at=NOW - timedelta(minutes=1),
        sender_name="Alice", meta={"is_group": False}, conversation_key="rec:c",
        status="done",
    )  # fmt: skip
    await inbox.insert_one(good.to_doc())
    damaged = {**good.to_doc(), "_id": c.inbox_key("rec", "2"), "external_id": "2"}
    await inbox.insert_one({**damaged, "meta": "not a document"})

    [row] = await newest_received(db, lambda row: row.sender_id == "alice", 5, NOW)
    assert row == good and row.meta["is_group"] is False and row.sender_name == "Alice"
