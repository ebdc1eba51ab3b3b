"""A logged-out dashboard cookie stays logged out after a restart: the logout is kept in
the database and the restarted web app loads it; a session that did not log out still
works."""

from __future__ import annotations

from tests.agent.app.dashboard.test_auth import csrf_of, fresh_client, log_in, session_cookie
from tests.fakes.alert_app import Harness


async def test_a_logout_outlives_a_restart(dash: Harness) -> None:
    before = await fresh_client(dash)
    try:
        gone = session_cookie(await log_in(before))["wk_session"].value
        kept = session_cookie(await log_in(before))["wk_session"].value
        before.session.cookie_jar.clear()
        cookie = {"Cookie": f"wk_session={gone}"}
        csrf = await csrf_of(before, headers=cookie)
        out = await before.post(
            "/logout", data={"csrf": csrf}, headers=cookie, allow_redirects=False
        )
        assert out.status == 303
    finally:
        await before.close()

    after = await fresh_client(dash)  # a new web app on the same database: a restart
    try:
        for value, status in ((gone, 303), (kept, 200)):
            resp = await after.get(
                "/alerts", headers={"Cookie": f"wk_session={value}"}, allow_redirects=False
            )
            assert resp.status == status, value
    finally:
        await after.close()
