"""Every redirect the dashboard answers stays on this site (issue 36): the alert buttons'
``next``, the login's ``next`` and the fixed targets of the other actions all go through
one check (``same_site_path``), so a hostile value becomes ``/``, never a ``Location`` a
browser would follow off-site (``/\\evil`` is ``//evil`` to a browser; a tab is dropped)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from yarl import URL

from tests.agent.app.dashboard.conftest import TOKEN
from tests.agent.app.dashboard.test_auth import BEARER, csrf_of
from tests.fakes.alert_app import Harness
from tests.scheduling_kit import parts_of

HOSTILE: tuple[str, ...] = (
    "//evil.example",
    "/\\evil.example",
    "/\\\tevil.example",
    "/\t/evil.example",
    "https://evil.example",
    "%2F%2Fevil.example",
    "/%2F/evil.example",
    "/%5Cevil.example",
    "/\x00evil.example",
    "\x00",
    "/alerts\r\nSet-Cookie: wk_session=forged",
)
IDS = [repr(value)[:30] for value in HOSTILE]


def on_site(location: str) -> bool:
    """What a browser would make of ``location``: a path on this site, nothing else."""
    cleaned = location.replace("\t", "").replace("\n", "").replace("\r", "").replace("\\", "/")
    parts = urlsplit(cleaned)
    return (
        location.startswith("/")
        and not cleaned.startswith("//")
        and not parts.scheme
        and not parts.netloc
        and location.isprintable()
        and " " not in location
    )


@pytest.mark.parametrize("target", HOSTILE, ids=IDS)
async def test_an_alert_button_goes_back_only_to_a_path_on_this_site(
    dash: Harness, target: str
) -> None:
    code = (await dash.router.raise_alert(severity="warning", title="Disk full")).code
    csrf = await csrf_of(dash.client, "/alerts", headers=BEARER)
    resp = await dash.client.post(
        f"/alerts/{code}/ack",
        data={"csrf": csrf, "next": target},
        headers=BEARER,
        allow_redirects=False,
    )
    assert resp.status == 303
    assert resp.headers["Location"] == "/"
    alert = await dash.router.store.by_code(code)
    assert alert is not None and alert.status == "acknowledged"  # the ack itself held


async def test_an_alert_button_still_goes_back_to_the_page_it_was_pressed_on(
    dash: Harness,
) -> None:
    code = (await dash.router.raise_alert(severity="warning", title="Disk full")).code
    csrf = await csrf_of(dash.client, "/alerts", headers=BEARER)
    resp = await dash.client.post(
        f"/alerts/{code}/snooze",
        data={"csrf": csrf, "next": "/alerts?page=2"},
        headers=BEARER,
        allow_redirects=False,
    )
    assert resp.status == 303 and resp.headers["Location"] == "/alerts?page=2"


@pytest.mark.parametrize("target", HOSTILE, ids=IDS)
async def test_the_login_goes_only_to_a_path_on_this_site(dash: Harness, target: str) -> None:
    posted = await dash.client.post(
        "/login", data={"token": TOKEN, "next": target}, allow_redirects=False
    )
    assert posted.status == 303 and on_site(posted.headers["Location"])
    link = URL("/login?next=" + quote(target, safe=""), encoded=True)
    got = await dash.client.get(link, headers=BEARER, allow_redirects=False)
    assert got.status == 303 and on_site(got.headers["Location"])


async def test_every_dashboard_action_answers_a_location_on_this_site(dash: Harness) -> None:
    """Each POST route of the dashboard, given a hostile ``next`` (and a hostile id where
    the path takes one): its redirect, if any, stays on this site."""
    job = await parts_of(dash.app).jobs.create(
        name="Morning news", instruction="Read the news", cron_expression="0 7 * * *"
    )
    code = (await dash.router.raise_alert(severity="warning", title="Disk full")).code
    csrf = await csrf_of(dash.client, "/jobs", headers=BEARER)
    posts: list[tuple[str, dict[str, Any]]] = [
        (f"/alerts/{code}/resolve", {}),
        (f"/jobs/{job.id}/pause", {}),
        (f"/jobs/{job.id}/resume", {}),
        ("/jobs/%2F%2Fevil.example/pause", {}),
        ("/spend/prices", {"model": "gpt-x", "input": "1", "output": "2"}),
        (f"/jobs/{job.id}/delete", {}),
    ]
    for path, form in posts:
        for target in HOSTILE:
            resp = await dash.client.post(
                URL(path, encoded=True),
                data={"csrf": csrf, "next": target, **form},
                headers=BEARER,
                allow_redirects=False,
            )
            assert resp.status == 303, (path, target, resp.status)
            location = resp.headers["Location"]
            assert on_site(location), (path, target, location)
