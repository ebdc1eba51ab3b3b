"""The outbox's store: rows in and out as ``OutboxRow``, each chat's due rows claimed
oldest first, a send's outcome stored from the row, and the backlog counted."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage.repos.outbox import Backlog, OutboxStore
from storage.repos.outbox_row import OutboxRow

Doc = dict[str, Any]
NOW = datetime(2026, 3, 6, 12, tzinfo=UTC)


def row(key: str, chat: str, minutes: int = 0) -> OutboxRow:
    at = NOW + timedelta(minutes=minutes)
    return OutboxRow(key, "telegram", chat, f"text {key}", created_at=at, next_attempt_at=at)


async def test_each_chats_due_rows_are_claimed_oldest_first(db: AsyncDatabase[Doc]) -> None:
    store = OutboxStore(db)
    for queued in (row("b1", "b", 1), row("a1", "a", 2), row("b2", "b", 3), row("c1", "c", 60)):
        await store.add(queued)
    due = NOW + timedelta(minutes=5)
    assert await store.due_chats(due, 100) == [("telegram", "b"), ("telegram", "a")]
    first = await store.claim(("telegram", "b"), due)
    assert first is not None and (first.idempotency_key, first.status) == ("b1", "sending")
    assert (first.attempts, first.claimed_at, first.text) == (1, due, "text b1")
    second = await store.claim(("telegram", "b"), due)
    assert second is not None and second.idempotency_key == "b2"
    assert await store.claim(("telegram", "b"), due) is None
    assert await store.backlog() == Backlog(
        pending=4, failed=0, oldest_pending_at=NOW + timedelta(minutes=1)
    )


async def test_a_sends_outcome_is_stored_from_the_row(db: AsyncDatabase[Doc]) -> None:
    store = OutboxStore(db)
    await store.add(row("k1", "a"))
    claimed = await store.claim(("telegram", "a"), NOW)
    assert claimed is not None
    sent = replace(claimed, status="sent", sent_at=NOW, external_ids=("77",), info={"n": 2})
    await store.settle(sent)
    stored = await store.get("k1")
    assert stored is not None and (stored.channel, stored.chat_id) == ("telegram", "a")
    raw = await db["outbox"].find_one({"_id": "k1"})
    assert raw is not None and (raw["status"], raw["external_ids"], raw["info"]) == (
        "sent",
        ["77"],
        {"n": 2},
    )
    gone = replace(row("k2", "a"), status="failed", last_error="blocked", failed_at=NOW)
    assert await store.record(gone) is None  # one insert, at once
    [failed] = await store.failed(10)
    assert (failed.idempotency_key, failed.last_error, failed.failed_at) == ("k2", "blocked", NOW)
    [error] = await store.record(replace(gone, status="sent")) or [None]
    assert isinstance(error, DuplicateKeyError)  # its key is stored already
    assert await store.backlog() == Backlog(pending=0, failed=1, oldest_pending_at=None)


async def test_rows_left_sending_go_back_when_stale_or_all(db: AsyncDatabase[Doc]) -> None:
    store = OutboxStore(db)
    for queued in (row("old", "a"), row("new", "b")):
        await store.add(replace(queued, status="pending"))
    await store.claim(("telegram", "a"), NOW)
    await store.claim(("telegram", "b"), NOW + timedelta(minutes=5))
    await store.requeue_sending(claimed_before=NOW + timedelta(minutes=1))
    assert await store.due_chats(NOW + timedelta(minutes=5), 10) == [("telegram", "a")]
    await store.requeue_sending()
    assert len(await store.due_chats(NOW + timedelta(minutes=5), 10)) == 2
