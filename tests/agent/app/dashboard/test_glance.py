"""The owner's glance over HTTP and as pure functions: times in words, the status line's
order, SMS not set up, the live endpoints behind the login, "run now" with CSRF."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from bson import ObjectId

from agent.app.dashboard.alerts import by_severity
from agent.app.dashboard.context import human_time
from agent.app.dashboard.overview import (
    NO_SMS,
    SMS_FAILING,
    alert_problems,
    health_problems,
    status_line,
)
from agent.app.dashboard.runs import row_of, status_of
from agent.app.healthcheck import Component, Health
from agent.app.status import status_data, status_text
from storage.repos.alert_record import Alert
from storage.repos.runs.record import Run
from tests.agent.app.dashboard.conftest import TOKEN
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app
from tests.fakes.twilio_api import twilio_error
from tests.scheduling_kit import parts_of

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 27, 7, 55, tzinfo=BERLIN)  # a Friday
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("moment", "words"),
    [
        (NOW + timedelta(minutes=20), "08:15, in 20 min"),
        (NOW - timedelta(minutes=35), "07:20, 35 min ago"),
        (NOW + timedelta(seconds=20), "07:55, now"),
        (NOW + timedelta(hours=2, minutes=5), "10:00, in 2 h 5 min"),
        (NOW + timedelta(hours=9), "16:55"),
        (datetime(2026, 11, 26, 22, 10, tzinfo=BERLIN), "yesterday 22:10"),
        (datetime(2026, 11, 28, 7, 0, tzinfo=BERLIN), "tomorrow 07:00"),
        (datetime(2026, 11, 24, 14, 0, tzinfo=BERLIN), "Tue 14:00"),
        (datetime(2026, 11, 3, 14, 0, tzinfo=BERLIN), "3 Nov 14:00"),
        (datetime(2025, 11, 3, 14, 0, tzinfo=BERLIN), "3 Nov 2025"),
        (None, "never"),
    ],
)
def test_human_time_reads_as_a_person_says_it(moment: datetime | None, words: str) -> None:
    assert human_time(moment, BERLIN, NOW) == words


def _alerts(*fields: Mapping[str, object]) -> list[Alert]:
    """Alerts as stored, with only ``fields`` (and a code and a time) set."""
    at = datetime(2026, 11, 27, 8, 0, tzinfo=BERLIN)
    return [Alert.from_doc({"code": "1", "created_at": at, **f}) for f in fields]


def test_human_time_is_in_the_owner_timezone() -> None:
    utc = datetime(2026, 11, 27, 6, 40, tzinfo=ZoneInfo("UTC"))  # 07:40 in Berlin
    assert human_time(utc, BERLIN, NOW) == "07:40, 15 min ago"


def _health(**others: Component) -> Health:
    base = {"model": Component("ok"), "outbox": Component("ok"), "mcp": Component("off")}
    return Health("ok", Component("ok"), {"telegram": Component("ok")}, base | others)


def test_all_clear_only_when_nothing_is_open_and_every_part_is_well() -> None:
    assert status_line(health_problems(_health(), True, [])) == {
        "text": "All clear",
        "level": "ok",
        "more": [],
    }
    info = _alerts({"status": "open", "severity": "info"})
    assert status_line(alert_problems(info))["text"] == "1 info alert not acknowledged"
    acked = _alerts({"status": "acknowledged", "severity": "critical"})
    assert status_line(alert_problems(acked))["text"] == "1 alert acknowledged, not resolved"


def test_the_status_line_names_the_worst_thing_first() -> None:
    health = Health(
        "ok",
        Component("ok"),
        {"telegram": Component("down")},
        {
            "model": Component("degraded"),
            "outbox": Component("ok"),
            "mcp": Component("degraded", {"servers": {"ghost": "failed", "fs": "connected"}}),
        },
    )
    problems = health_problems(health, False, [])
    line = status_line(problems)
    # What stops a page first: the model, the only chat channel, SMS (issue 39 item 4).
    assert line["text"] == "model unreachable"
    assert NO_SMS == "SMS not set up: critical alerts cannot page you"
    assert line["more"] == ["Telegram down", NO_SMS, "MCP server ghost failing"]

    alerts = [
        {"status": "open", "severity": "warning"},
        {"status": "open", "severity": "critical"},
        {"status": "open", "severity": "warning"},
    ]
    line = status_line(alert_problems(_alerts(*alerts)) + problems)
    assert (line["text"], line["level"]) == ("model unreachable", "critical")
    assert line["more"] == [
        "Telegram down",
        NO_SMS,
        "1 critical alert not acknowledged",
        "2 warning alerts not acknowledged",
        "MCP server ghost failing",
    ]
    line = status_line(alert_problems(_alerts(*alerts)))
    assert (line["text"], line["level"]) == ("1 critical alert not acknowledged", "critical")
    assert status_line(health_problems(_health(model=Component("degraded")), True, []))["text"] == (
        "model unreachable"
    )
    down = Health("unreachable", Component("unknown"), {}, {})
    assert status_line(health_problems(down, True, []))["text"] == "database unreachable"


def test_alerts_go_by_severity_unacknowledged_first_then_newest_first() -> None:
    at = datetime(2026, 11, 27, 8, 0, tzinfo=BERLIN)
    alerts = [
        {"code": "1", "severity": "info", "status": "open", "created_at": at},
        {"code": "2", "severity": "warning", "status": "open", "created_at": at},
        {"code": "3", "severity": "critical", "status": "resolved", "created_at": at},
        {"code": "4", "severity": "warning", "status": "acknowledged", "created_at": at},
        {"code": "5", "severity": "critical", "status": "open", "created_at": at},
    ]
    for i, alert in enumerate(alerts):
        alert["created_at"] = at + timedelta(minutes=i)
    # The acknowledged warning #4 (newer) comes after the unacknowledged #2.
    assert [a.code for a in by_severity(_alerts(*alerts))] == ["5", "2", "4", "1", "3"]


async def test_without_sms_the_status_says_a_critical_alert_cannot_page(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, twilio_from_number=None) as dash:
        assert "sms" not in dash.app.channels
        html = await (await dash.client.get("/", headers=BEARER)).text()
    status = html[html.index('id="status"') : html.index("</div>", html.index('id="status"'))]
    assert NO_SMS in status
    assert "critical alerts cannot page you" in html[html.index('id="health"') :]


def headline(html: str) -> str:
    start = html.index('id="status"')
    found = re.search(r'<strong class="headline">(.*?)</strong>', html[start:], re.S)
    assert found is not None
    return found.group(1)


async def test_sms_that_fails_leads_the_status_line_until_one_goes(app_db: AppDb) -> None:
    """Twilio refusing the page (a wrong auth token): what stops a page comes before the
    critical alert it could not page, on the status line and in the health panel."""
    async with alert_app(app_db) as dash:
        dash.twilio.push(twilio_error(401, 20003, "Authenticate"))
        await dash.router.raise_alert(severity="critical", title="Disk full")
        html = await (await dash.client.get("/", headers=BEARER)).text()
        assert headline(html).startswith(f"{SMS_FAILING} (twilio answered 401")
        assert "1 critical alert not acknowledged" in html
        health = html[html.index('id="health"') :]
        assert "failing" in health and "last try: twilio answered 401" in health
        words = status_text(await status_data(dash.app), "m", tz=BERLIN, now=NOW)
        assert "Channels: sms failing (twilio answered 401" in words

        await dash.router.raise_alert(severity="critical", title="Disk still full")
        html = await (await dash.client.get("/", headers=BEARER)).text()
    assert headline(html) == "2 critical alerts not acknowledged"
    assert SMS_FAILING not in html


async def test_no_chat_to_the_owner_leads_the_status_line(app_db: AppDb) -> None:
    """No chat reaches the owner (Telegram not paired, or none): said first, before any
    alert; with no SMS either, that alerts reach nobody."""
    async with alert_app(app_db, telegram=False) as dash:
        await dash.router.raise_alert(severity="critical", title="Disk full")
        html = await (await dash.client.get("/", headers=BEARER)).text()
    assert headline(html) == "no chat reaches you: only SMS pages get to you"
    async with alert_app(app_db, telegram=False, twilio_from_number=None) as dash:
        html = await (await dash.client.get("/", headers=BEARER)).text()
    assert headline(html) == "no chat or SMS reaches you: alerts reach nobody"
    assert NO_SMS not in html[: html.index('id="health"')]  # one line says it


async def test_live_parts_are_json_behind_the_same_login(dash: Harness) -> None:
    await dash.router.raise_alert(severity="critical", title="Site down")
    for path, part in (("/live/overview", 'id="status"'), ("/live/alerts", "Site down")):
        out = await dash.client.get(path, allow_redirects=False)
        assert out.status == 303 and out.headers["Location"].startswith("/login"), path
        resp = await dash.client.get(path, headers=BEARER)
        assert resp.status == 200 and resp.content_type == "application/json", path
        assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
        body = await resp.json()
        assert re.fullmatch(r"\d\d:\d\d", body["updated"]), body["updated"]
        assert part in body["html"] and "<script" not in body["html"], path
    page = await (await dash.client.get("/", headers=BEARER)).text()
    assert '<script src="/static/live.js" defer></script>' in page
    assert 'data-live="/live/overview" data-every="15"' in page
    assert re.search(r"<script(?![^>]*\bsrc=)", page) is None, "no inline script"
    script = await dash.client.get("/static/live.js")
    assert script.status == 200 and "fetch(" in await script.text()


async def test_run_now_needs_the_csrf_token_and_records_a_manual_run(dash: Harness) -> None:
    job = await parts_of(dash.app).jobs.create(
        name="Morning news", instruction="Read the news", cron_expression="0 7 * * *"
    )
    once = await parts_of(dash.app).jobs.create(
        name="Call the bank", instruction="Remind me", in_minutes=90
    )
    page = await (await dash.client.get("/jobs", headers=BEARER)).text()
    assert f'action="/jobs/{job.id}/run"' in page
    assert f'action="/jobs/{once.id}/run"' not in page  # a one-time job runs at its time
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    runs = dash.app.deps.db["runs"]

    refused = await dash.client.post(f"/jobs/{job.id}/run", headers=BEARER, data={})
    assert refused.status == 403 and await runs.count_documents({}) == 0

    done = await dash.client.post(
        f"/jobs/{job.id}/run", headers=BEARER, data={"csrf": csrf.group(1)}, allow_redirects=False
    )
    assert done.status == 303 and done.headers["Location"] == "/jobs"
    shown = await (await dash.client.get("/jobs", headers=BEARER)).text()
    assert "Started “Morning news”; its answer goes to" in shown  # answered at once
    await parts_of(dash.app).engine.join()
    run = await runs.find_one({"job_id": job.id})
    assert run is not None and run["trigger"] == "manual" and run["status"] == "success"

    missing = await dash.client.post("/jobs/nope/run", headers=BEARER, data={"csrf": csrf.group(1)})
    assert "Nothing ran: no cron job with id" in await missing.text()


def test_a_failed_try_that_will_be_tried_again_says_retrying_and_when() -> None:
    retry = NOW + timedelta(minutes=3)
    doc = {"_id": ObjectId(), "kind": "cron", "name": "Backups", "status": "failed",
           "started_at": NOW}  # fmt: skip
    run = Run.from_doc(doc)
    assert status_of(run) == "failed" and row_of(run, BERLIN, NOW)["retry_at"] is None
    row = row_of(Run.from_doc({**doc, "retry_at": retry}), BERLIN, NOW)
    assert (row["status"], row["badge"], row["retry_at"]) == ("retrying", "warn", retry)
    assert human_time(row["retry_at"], BERLIN, NOW) == "07:58, in 3 min"
    assert status_of(Run.from_doc({**doc, "status": "success", "retry_at": retry})) == "success"
