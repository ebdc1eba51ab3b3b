"""After logging in, ``next`` only leads to a path on this site (issue 28): whatever a
link puts there (tabs, newlines, backslashes, a scheme, percent-encoded tricks), the
answer is a redirect to a same-site path or to ``/``, never off-site and never a 500."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from yarl import URL

from tests.agent.app.dashboard.conftest import TOKEN
from tests.agent.app.dashboard.test_auth import BEARER, fresh_client
from tests.fakes.alert_app import Harness

CASES: tuple[tuple[str, str], ...] = (
    # (what ``next`` holds once the query or form is decoded, where the login goes)
    ("/alerts", "/alerts"),
    ("/runs?kind=cron&page=2", "/runs?kind=cron&page=2"),
    ("/\t/evil.example", "/"),  # GET /login?next=/%09/evil.example: a browser drops the tab
    ("/%09/evil.example", "/"),
    ("//evil.example", "/"),
    ("/\\evil.example", "/"),
    ("/%5Cevil.example", "/"),
    ("/%2F/evil.example", "/"),
    ("https://evil.example", "/"),
    ("javascript:alert(1)", "/"),
    ("/alerts\r\nSet-Cookie: wk_session=forged", "/"),
    ("/alerts\n", "/"),
    ("/%0a/evil.example", "/"),
    ("/%0D%0ASet-Cookie:%20x=1", "/"),
    ("/\u2028/evil.example", "/"),  # a line separator
    ("/%E2%80%A8/evil.example", "/"),
    ("/\u200b/evil.example", "/"),  # zero width space
    ("／／evil.example", "/"),  # fullwidth solidus: not a path at all
    ("/alerts?q=café", "/alerts?q=caf%C3%A9"),
    ("", "/"),
    ("/" + "a" * 5000, "/"),
)
IDS = [repr(raw)[:40] for raw, _ in CASES]


def _login_url(raw: str) -> URL:
    return URL("/login?next=" + quote(raw, safe=""), encoded=True)


@pytest.mark.parametrize(("raw", "expected"), CASES, ids=IDS)
async def test_posting_the_right_token_goes_only_to_a_same_site_path(
    dash: Harness, raw: str, expected: str
) -> None:
    client = await fresh_client(dash)
    try:
        resp = await client.post(
            "/login", data={"token": TOKEN, "next": raw}, allow_redirects=False
        )
        assert resp.status == 303
        assert resp.headers["Location"] == expected
        assert "wk_session" in resp.cookies  # logged in all the same
    finally:
        await client.close()


@pytest.mark.parametrize(("raw", "expected"), CASES, ids=IDS)
async def test_the_login_link_goes_only_to_a_same_site_path(
    dash: Harness, raw: str, expected: str
) -> None:
    """Already logged in: ``GET /login?next=...`` redirects at once; logged out, the form
    carries only the safe target."""
    resp = await dash.client.get(_login_url(raw), headers=BEARER, allow_redirects=False)
    assert resp.status == 303, await resp.text()
    assert resp.headers["Location"] == expected
    page: Any = await dash.client.get(_login_url(raw), allow_redirects=False)
    assert page.status == 200
    html = await page.text()
    assert f'name="next" value="{expected}"' in html.replace("&amp;", "&")
