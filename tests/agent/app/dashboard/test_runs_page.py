"""The Runs page: a 7-day SVG timeline with one mark per run, and each run's own page."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from pathlib import Path

import pytest
from bson import ObjectId

from agent.app.dashboard.runs import STATUS_COLOURS
from tests.agent.app.dashboard.pages_kit import (
    AUTH,
    BERLIN,
    NOW,
    client_of,
    dash_app,
    page,
    record_run,
)
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import call_tool, parts_of, tool_call

MARK = re.compile(
    r'<a href="/runs/(?P<id>[0-9a-f]{24})" aria-label="(?P<label>[^"]*)">'
    r'<rect class="run run-(?P<status>\w+)" data-status="\w+" x="(?P<x>[\d.]+)" '
    r'y="(?P<y>[\d.]+)"[^>]*fill="(?P<fill>#[0-9a-f]{6})"'
)


pytestmark = pytest.mark.clock(NOW)


def marks_of(text: str) -> dict[str, dict[str, str]]:
    svg = text[text.index('<svg class="timeline"') : text.index("</svg>")]
    return {m["id"]: m.groupdict() for m in MARK.finditer(svg)}


async def test_timeline_has_one_mark_per_run_of_the_week(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        day = timedelta(days=1)
        seeded = {
            await record_run(
                app, "cron", "success", NOW - timedelta(hours=6), name="News"
            ): "success",
            await record_run(
                app, "pulse", "failed", NOW - day, error="model unavailable"
            ): "failed",
            await record_run(app, "cron", "timeout", NOW - 3 * day, name="Backups"): "timeout",
            await record_run(app, "pulse", "skipped", NOW - 5 * day): "skipped",
            # Early on the oldest day shown (six days ago, 00:30 Berlin).
            await record_run(
                app, "cron", "success", (NOW - 6 * day).replace(hour=0, minute=30), name="Early"
            ): "success",
        }
        old = await record_run(app, "cron", "success", NOW - 7 * day, name="Too old")
        async with client_of(app) as client:
            text = await page(client, "/runs")
    found = marks_of(text)
    assert {run_id: mark["status"] for run_id, mark in found.items()} == seeded
    assert old not in found and old not in text
    for mark in found.values():
        assert mark["fill"] == STATUS_COLOURS[mark["status"]]
        assert mark["status"] in html.unescape(mark["label"])
    [failed] = [m for m in found.values() if m["status"] == "failed"]
    [news] = [m for m in found.values() if "News" in html.unescape(m["label"])]
    assert float(failed["y"]) > float(news["y"])  # yesterday's row is below today's
    assert html.unescape(news["label"]) == 'cron "News" success, Thu 26 Nov 09:00, 2.0 s'
    for status in STATUS_COLOURS:  # the legend names every colour
        assert f'fill="{STATUS_COLOURS[status]}"/></svg> {status}</li>' in text
    assert 'viewBox="0 0 ' in text and 'width="100%"' in text
    assert "5 runs in the last 7 days" in text
    assert text.count('class="run-row"') == 5


async def test_run_page_shows_trigger_duration_calls_tokens_and_result(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(tool_call("manage_cronjob", action="list"), "All backups fine")
    async with dash_app(app_db, tmp_path, clock, model) as app:
        created = await call_tool(
            app, "manage_cronjob", None, action="create", name="Backups",
            instruction="Check the backups", cron_expression="0 16 * * *",
        )  # fmt: skip
        assert "created" in created, created
        clock.set(NOW.replace(hour=16, minute=0, second=1))
        await parts_of(app).engine.run_due()
        run = await app.deps.db["runs"].find_one({"kind": "cron"})
        assert run is not None and run["status"] == "success"
        async with client_of(app) as client:
            text = html.unescape(await page(client, f"/runs/{run['_id']}"))
            listed = await page(client, "/runs")
    assert 'cron “Backups” <span class="badge ok">success</span>' in text
    assert "<dt>Trigger</dt><dd>schedule</dd>" in text
    assert "<dt>Started</dt><dd>16:00, now</dd>" in text
    assert "<dt>Tokens</dt><dd>20 in · 10 out</dd>" in text  # two model calls of 10/5
    assert "<dt>Tool calls</dt><dd>1</dd>" in text
    assert '<code>manage_cronjob</code> <span class="muted">{"action": "list"}</span>' in text
    assert '"jobs": [{"job_id": "' in text  # the call's result, in short
    assert '<pre class="result">All backups fine</pre>' in text
    assert f'href="/runs/{run["_id"]}"' in listed


async def test_failed_run_page_shows_the_error(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        run_id = await record_run(
            app, "pulse", "failed", NOW - timedelta(minutes=5), seconds=61,
            error="model unavailable", reason="model_unavailable",
        )  # fmt: skip
        async with client_of(app) as client:
            text = await page(client, f"/runs/{run_id}")
    assert '<span class="badge bad">failed</span>' in text
    assert "model unavailable" in text and "(model_unavailable)" in text
    assert "<dt>Duration</dt><dd>61.0 s</dd>" in text


async def test_unknown_or_malformed_run_ids_are_not_found(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app, client_of(app) as client:
        wrong_token = await client.get(
            "/runs/" + "a" * 24, headers={"Authorization": "Bearer nope"}, allow_redirects=False
        )
        unknown = await client.get("/runs/" + "a" * 24, headers=AUTH)
        malformed = await client.get("/runs/<script>", headers=AUTH)
        unknown_text = await unknown.text()
    assert wrong_token.status == 303 and wrong_token.headers["Location"].startswith("/login")
    assert unknown.status == 404 and "No such run" in unknown_text
    assert malformed.status == 404


def test_marks_fall_on_the_owner_local_day() -> None:
    from agent.app.dashboard.runs import marks
    from storage.repos.runs.record import Run

    late = NOW.replace(hour=0, minute=30).astimezone(BERLIN)  # 23:30 UTC the day before
    doc = {"_id": ObjectId(), "kind": "pulse", "status": "success", "started_at": late}
    run = Run.from_doc(doc)
    [mark] = marks([run], NOW.date(), BERLIN)
    assert (mark.day, mark.lane, mark.hour) == (0, 0, 0.5)


async def test_a_damaged_run_record_is_left_out_and_the_page_still_shows(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        good = await record_run(app, "cron", "success", NOW - timedelta(hours=1), name="News")
        await app.deps.db["runs"].insert_one(
            {"kind": "cron", "name": "Hand-edited", "status": "success",
             "started_at": NOW - timedelta(hours=2), "duration_ms": "slow"}
        )  # fmt: skip
        async with client_of(app) as client:
            text = await page(client, "/runs")
    assert list(marks_of(text)) == [good]
    assert "Hand-edited" not in text


async def test_a_failure_at_the_same_moment_as_a_success_is_drawn_above_it(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        at = NOW - timedelta(hours=2)
        failed = await record_run(app, "cron", "failed", at, name="Backups", error="disk full")
        fine = await record_run(app, "cron", "success", at, name="News")
        async with client_of(app) as client:
            text = await page(client, "/runs")
    drawn = list(marks_of(text))  # in the order the SVG paints them: later is on top
    assert drawn.index(failed) > drawn.index(fine)
    found = marks_of(text)
    assert (found[failed]["x"], found[failed]["y"]) == (found[fine]["x"], found[fine]["y"])
