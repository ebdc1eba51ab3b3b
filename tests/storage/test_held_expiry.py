"""Issue 36, point 9: expired approval groups do not use up the 4-digit codes.

7,000 groups held more than a day ago (some from before groups had ``expires_at``)
and never answered take 7,000 of the 9,000 codes; 40 new holds all get a code, each
its own, and the stale groups they drew are gone. The TTL index on ``settings``
deletes expired groups in the background: a SecantusDB server with its sweeper on
(the suite's runs without: ``tests/conftest.py``) deletes one and keeps a live one.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from storage.collections import ensure_indexes
from storage.repos.held_sends import KEEP, PREFIX, HeldAction, HeldSend, HeldSends
from tests.waiting import until_async

Doc = dict[str, Any]
NOW = datetime(2026, 11, 28, 6, 0, tzinfo=UTC)


async def test_seven_thousand_stale_groups_do_not_block_new_holds(db: AsyncDatabase[Doc]) -> None:
    await ensure_indexes(db)
    held_at = NOW - KEEP - timedelta(hours=2)
    codes = random.Random(36).sample(range(1000, 10000), 7000)
    stale = [
        {
            "_id": f"{PREFIX}{code}",
            "key": f"old{code}",
            "exchange": f"x{code}",
            "sends": [{"channel": "sms", "chat_id": "+15550100", "text": "hi"}],
            "actions": [],
            "held_at": held_at,
            **({"expires_at": held_at + KEEP} if i % 2 else {}),  # half from before it
        }
        for i, code in enumerate(codes)
    ]
    await db["settings"].insert_many(stale)
    live = await HeldSends(db).hold(HeldSend("sms", "+1555", "still open"), NOW, exchange="live")

    store = HeldSends(db)
    groups = [
        await store.hold(HeldAction.of("save_memory", {"memory": f"fact {i}"}, "test"), NOW,
                         exchange=f"new-{i}")
        for i in range(40)
    ]  # fmt: skip
    assert len({g.code for g in groups}) == 40 and live.code not in {g.code for g in groups}
    for group in groups:
        waiting = await store.waiting(group.code, NOW)
        assert waiting is not None and waiting.actions == group.actions
    assert await store.waiting(live.code, NOW) is not None  # a live group keeps its code
    drawn = [g.code for g in [live, *groups] if int(g.code) in set(codes)]
    assert drawn, "no stale code drawn: the test proves nothing"
    left = await db["settings"].count_documents({"_id": {"$regex": f"^{PREFIX}"}})
    assert left == 7000 + 41 - len(drawn)  # each stale group drawn gave its code up


async def test_expired_groups_are_deleted_by_the_ttl_index(tmp_path: Path) -> None:
    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=str(tmp_path / "ttl"),
        replica_set_name=None,
        ttl_sweep_seconds=0.2,
    )
    server.start()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        str(server.uri), directConnection=True, retryWrites=False, tz_aware=True
    )
    try:
        db = client["ttl"]
        await ensure_indexes(db)
        now = datetime.now(UTC)  # the sweeper's clock is the wall clock
        store = HeldSends(db)
        old = await store.hold(HeldSend("sms", "+1555", "old"), now - KEEP, exchange="old")
        new = await store.hold(HeldSend("sms", "+1555", "new"), now, exchange="new")

        async def swept() -> bool:
            return await db["settings"].find_one({"_id": f"{PREFIX}{old.code}"}) is None

        await until_async(swept, "the expired group deleted by the TTL sweeper")
        assert await store.waiting(new.code, now) is not None
    finally:
        await client.close()
        server.stop()
