"""Monitors raising alerts at the same moment (issue 28): concurrent ``POST /api/alerts``
with one ``dedupe_key`` all answer 2xx, one alert is stored and it counts every post;
concurrent first alerts of a fresh database each get their own code.

The race is real: many requests through the real HTTP server against the real
database, gathered at once, on a database with no alert yet (the code counter does not
exist, so the first alerts race to create it)."""

from __future__ import annotations

import asyncio

from storage.repos.alerts import CODE_COUNTER
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, Harness, alert_app

AUTH = {"Authorization": f"Bearer {ADMIN}"}
POSTS = 40
ROUNDS = 5


async def _fresh(h: Harness) -> None:
    """No alert and no code counter: the state of a new install."""
    db = h.app.database.db
    await db["alerts"].delete_many({})
    await db["settings"].delete_one({"_id": CODE_COUNTER})


async def test_concurrent_posts_with_one_dedupe_key_make_one_alert(app_db: AppDb) -> None:
    alert = {"severity": "warning", "title": "disk", "body": "full", "dedupe_key": "disk:/"}
    async with alert_app(app_db) as h:

        async def post() -> tuple[int, str]:
            resp = await h.client.post("/api/alerts", json=alert, headers=AUTH)
            return resp.status, await resp.text()

        for round_ in range(ROUNDS):
            await _fresh(h)
            answers = await asyncio.gather(*(post() for _ in range(POSTS)))
            statuses = sorted(status for status, _ in answers)
            assert statuses == [200] * (POSTS - 1) + [201], (round_, answers[:3])
            stored = await h.app.database.db["alerts"].find({}).to_list()
            assert len(stored) == 1, round_
            assert stored[0]["count"] == POSTS, round_


async def test_concurrent_raise_alert_calls_count_and_get_their_own_codes(
    app_db: AppDb,
) -> None:
    """The ``raise_alert`` tool's path (the router), with one key and with distinct keys."""
    async with alert_app(app_db) as h:
        for round_ in range(ROUNDS):
            await _fresh(h)
            same = [
                h.router.raise_alert(severity="info", title="backup", dedupe_key="backup")
                for _ in range(POSTS // 2)
            ]
            distinct = [
                h.router.raise_alert(severity="info", title=f"job {i}", dedupe_key=f"job-{i}")
                for i in range(POSTS // 2)
            ]
            views = await asyncio.gather(*same, *distinct)
            fresh = [v for v in views if not v.deduplicated]
            assert len(fresh) == 1 + POSTS // 2, round_
            assert len({v.code for v in fresh}) == len(fresh), round_  # no code twice
            backup = await h.app.database.db["alerts"].find_one({"dedupe_key": "backup"})
            assert backup is not None and backup["count"] == POSTS // 2, round_
            assert await h.app.database.db["alerts"].count_documents({}) == len(fresh)
