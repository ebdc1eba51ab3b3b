"""Guessing the admin token at ``/login`` is slowed down: after ten wrong tokens in a
minute every attempt gets 429 with Retry-After, the right token included, until the
minute has passed; a session already logged in keeps working meanwhile."""

from __future__ import annotations

from tests.agent.app.dashboard.conftest import TOKEN
from tests.agent.app.dashboard.test_auth import fresh_client, log_in
from tests.fakes.alert_app import Harness


async def test_ten_wrong_tokens_hold_every_login_for_the_rest_of_the_minute(dash: Harness) -> None:
    owner = await fresh_client(dash)
    guesser = await fresh_client(dash)
    try:
        assert (await log_in(owner)).status == 303
        for i in range(10):
            resp = await log_in(guesser, token=f"guess-{i}")
            assert resp.status == 401, i
            dash.clock.advance(seconds=1)
        held = await log_in(guesser, token=TOKEN)
        assert held.status == 429
        assert held.headers["Retry-After"] == "50"
        assert "try again in 50 s" in await held.text()
        assert "wk_session" not in held.cookies
        page = await owner.get("/alerts", allow_redirects=False)
        assert page.status == 200  # logged in before: not affected

        dash.clock.advance(seconds=50)  # the first wrong token leaves the window
        assert (await log_in(guesser, token=TOKEN)).status == 303
    finally:
        await owner.close()
        await guesser.close()


async def test_a_few_typos_do_not_hold_the_owner(dash: Harness) -> None:
    client = await fresh_client(dash)
    try:
        for i in range(9):
            assert (await log_in(client, token=f"typo-{i}")).status == 401
        assert (await log_in(client)).status == 303
    finally:
        await client.close()
