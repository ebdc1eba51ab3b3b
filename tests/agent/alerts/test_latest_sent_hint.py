"""``AlertStore.latest_sent`` spares the query while no alert is in play: every owner
message asks, and nearly always none is. A change through the store looks again at
once; one made elsewhere (another process) counts within ``hint_seconds``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.repos.alert_record import Alert, Status
from storage.repos.alerts import AlertStore

Doc = dict[str, Any]
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def alert(code: str, sent: datetime | None, status: Status = "open") -> Alert:
    created = NOW - timedelta(days=3)
    return Alert(None, code, "info", code, status, created, last_sent_at=sent)


async def test_nothing_sent_is_remembered_briefly(db: AsyncDatabase[Doc]) -> None:
    store = AlertStore(db, hint_seconds=60)
    assert await store.latest_sent(NOW - timedelta(hours=24)) is None
    # Written behind the store's back (another process): the hint still says none.
    await db["alerts"].insert_one(alert("7", NOW).to_doc())
    assert await store.latest_sent(NOW - timedelta(hours=24)) is None
    assert await AlertStore(db, hint_seconds=0).latest_sent(NOW - timedelta(hours=1)) is not None


async def test_a_change_through_the_store_looks_again(db: AsyncDatabase[Doc]) -> None:
    store = AlertStore(db, hint_seconds=60)
    assert await store.latest_sent() is None
    await store.insert(alert("8", NOW))
    found = await store.latest_sent(NOW - timedelta(minutes=5))
    assert found is not None and found.code == "8"
    await store.change(found.id, set_={"status": "resolved"})
    assert await store.latest_sent() is None


async def test_an_alert_sent_before_the_window_is_not_in_play(db: AsyncDatabase[Doc]) -> None:
    store = AlertStore(db, hint_seconds=60)
    await store.insert(alert("9", NOW - timedelta(days=2)))
    assert await store.latest_sent(NOW - timedelta(hours=24)) is None
    assert (await store.latest_sent()) is not None  # without a window it is the latest
    older = await store.latest_sent(NOW - timedelta(days=3))
    assert older is not None and older.code == "9"


async def test_one_query_answers_many_messages(db: AsyncDatabase[Doc]) -> None:
    store = AlertStore(db, hint_seconds=60)
    calls: list[Doc] = []
    real = store._alerts.find_one

    async def find_one(*args: Any, **kwargs: Any) -> Doc | None:
        calls.append(args[0])
        return await real(*args, **kwargs)

    store._alerts.find_one = find_one  # type: ignore[method-assign]
    for _ in range(20):
        assert await store.latest_sent(NOW - timedelta(hours=24)) is None
    assert len(calls) == 1
