"""A damaged ``dashboard_sessions`` document (edited by hand, half-written by an older
version) costs nothing but its damaged entries: the dashboard starts, logins work, and
the logouts it still holds are honoured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from storage import collections as c
from storage.repos.dashboard_sessions import DOC_ID, RevokedStore
from tests.agent.app.dashboard.test_auth import fresh_client, log_in, session_cookie
from tests.fakes.alert_app import Harness

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "revoked",
    [
        "not a mapping",
        ["a", "list"],
        {"s1": "tomorrow", "s2": 12, "s3": None, "s4": {"$date": "x"}, "s5": [NOW]},
    ],
)
async def test_damaged_entries_are_skipped(dash: Harness, revoked: Any) -> None:
    settings = dash.app.database.db[c.SETTINGS]
    await settings.replace_one({"_id": DOC_ID}, {"revoked": revoked}, upsert=True)
    assert await RevokedStore(dash.app.database.db).load(NOW) == {}

    client = await fresh_client(dash)  # the web app loads the document as it starts
    try:
        cookie = session_cookie(await log_in(client))["wk_session"].value
        resp = await client.get(
            "/alerts", headers={"Cookie": f"wk_session={cookie}"}, allow_redirects=False
        )
        assert resp.status == 200
    finally:
        await client.close()


async def test_good_entries_beside_damaged_ones_still_count(dash: Harness) -> None:
    later = NOW + timedelta(hours=1)
    naive = (NOW + timedelta(hours=2)).replace(tzinfo=None)  # as an old pymongo read it
    stored = {"good": later, "naive": naive, "bad": "soon", "expired": NOW - timedelta(1)}
    settings = dash.app.database.db[c.SETTINGS]
    await settings.replace_one({"_id": DOC_ID}, {"revoked": stored}, upsert=True)

    found = await RevokedStore(dash.app.database.db).load(NOW)

    assert found == {"good": later, "naive": naive.replace(tzinfo=UTC)}
