"""``manage_cronjob``: one-time jobs, exactly one schedule, replies in words, on_failure."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import App
from agent.cli.upcoming import print_schedule
from agent.tools.cron import MANAGE_CRONJOB
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import call_tool, parts_of, scheduled_app, tool_call, tool_results
from tests.tokens import count_tokens

NOW = datetime(2026, 11, 26, 14, 5, 30, tzinfo=BERLIN)  # Thursday
NOW_TEXT = "it is now 2026-11-26T14:05+01:00 (Europe/Berlin)"


@pytest.fixture
async def app(app_db: AppDb, tmp_path: Path) -> AsyncIterator[App]:
    clock = FakeClock(NOW.astimezone(UTC))
    model = ScriptedModel(lambda r: "")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as a:
        yield a


async def _tool(app: App, **args: Any) -> dict[str, Any]:
    ctx = owner_ctx(app.deps, channel="console", chat_id="owner")
    return await call_tool(app, "manage_cronjob", ctx, **args)  # type: ignore[no-any-return]


async def _create(app: App, **args: Any) -> dict[str, Any]:
    return await _tool(app, action="create", name="Dentist", instruction="Remind me", **args)


async def test_in_minutes_creates_a_one_time_job(app: App) -> None:
    created = (await _create(app, in_minutes=20))["created"]
    assert created["kind"] == "one-time"
    assert created["schedule"] == "runs once at 2026-11-26T14:25+01:00, then is kept as done"
    assert "run_at" not in created and "next_fires" not in created  # the time is said once
    assert created["on_failure"] == "warning" and "cron_expression" not in created
    stored = await app.deps.db["cronjobs"].find_one({"_id": created["job_id"]})
    assert stored is not None and stored["kind"] == "once"
    assert (
        stored["next_fire_at"] == stored["run_at"] == datetime(2026, 11, 26, 13, 25, 30, tzinfo=UTC)
    )


async def test_run_at_naive_is_the_owners_time_and_with_offset_is_kept(app: App) -> None:
    tomorrow_8 = (await _create(app, run_at="2026-11-27T08:00"))["created"]
    assert tomorrow_8["schedule"] == "runs once at 2026-11-27T08:00+01:00, then is kept as done"
    tokyo = (await _create(app, run_at="2026-11-27T08:00+09:00"))["created"]
    assert "once at 2026-11-27T00:00+01:00," in tokyo["schedule"]
    own_zone = (await _create(app, run_at="2026-11-27T08:00", timezone="Asia/Tokyo"))["created"]
    assert "once at 2026-11-27T08:00+09:00," in own_zone["schedule"]


async def test_a_time_in_the_past_is_refused_with_the_local_time(app: App) -> None:
    past = await _create(app, run_at="2026-11-26T09:00")
    assert past == {
        "error": f"run_at 2026-11-26T09:00+01:00 is in the past; {NOW_TEXT}",
    }
    zero = await _create(app, in_minutes=0)
    assert NOW_TEXT in zero["error"] and "in_minutes 0" in zero["error"]
    assert await app.deps.db["cronjobs"].count_documents({}) == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({}, "give exactly one of cron_expression"),
        ({"cron_expression": "0 9 * * *", "run_at": "2026-11-27T08:00"}, "cron_expression and"),
        ({"run_at": "2026-11-27T08:00", "in_minutes": 5}, "run_at and in_minutes were given"),
    ],
)
async def test_exactly_one_schedule_is_required(app: App, args: dict[str, Any], said: str) -> None:
    error = (await _create(app, **args))["error"]
    assert said in error and "run_at (one-time" in error and "in_minutes (one-time" in error


async def test_recurring_reply_says_how_often_it_repeats(app: App) -> None:
    created = (await _create(app, cron_expression="0 9 * * 1-5"))["created"]
    assert created["schedule"] == "repeats: every weekday at 09:00 (Europe/Berlin)"
    assert created["kind"] == "recurring" and created["cron_expression"] == "0 9 * * 1-5"
    assert created["next_fires"][0] == "2026-11-27T09:00+01:00"
    updated = await _tool(app, action="update", job_id=created["job_id"], cron_expression="@daily")
    assert updated["updated"]["schedule"] == "repeats: every day at 00:00 (Europe/Berlin)"


async def test_random_and_hashed_cron_is_refused_through_the_tool(app: App) -> None:
    error = (await _create(app, cron_expression="R 9 * * *"))["error"]
    assert "'R' (random) is not supported" in error and "e.g. '17 9 * * *'" in error
    assert "'H' (hashed)" in (await _create(app, cron_expression="H 9 * * *"))["error"]


async def test_on_failure_is_validated_stored_and_shown(app: App) -> None:
    job = (await _create(app, in_minutes=5, on_failure="critical"))["created"]
    assert job["on_failure"] == "critical"
    changed = await _tool(app, action="update", job_id=job["job_id"], on_failure="none")
    assert changed["updated"]["on_failure"] == "none"
    bad = await _create(app, in_minutes=5, on_failure="loud")
    assert "on_failure" in bad["error"] and "'warning', 'critical' or 'none'" in bad["error"]


async def test_update_switches_between_once_and_recurring(app: App) -> None:
    job = (await _create(app, in_minutes=30))["created"]
    moved = (await _tool(app, action="update", job_id=job["job_id"], in_minutes=90))["updated"]
    assert moved["schedule"] == "runs once at 2026-11-26T15:35+01:00, then is kept as done"
    recurring = await _tool(app, action="update", job_id=job["job_id"], cron_expression="0 8 * * *")
    assert recurring["updated"]["kind"] == "recurring"
    assert recurring["updated"]["cron_expression"] == "0 8 * * *"
    back = await _tool(app, action="update", job_id=job["job_id"], run_at="2026-12-01T10:00")
    assert back["updated"]["kind"] == "one-time"
    stored = await app.deps.db["cronjobs"].find_one({"_id": job["job_id"]})
    assert stored is not None and "cron_expression" not in stored


async def test_one_time_jobs_skip_the_min_interval_check(app: App) -> None:
    first = await _create(app, in_minutes=1)
    second = await _create(app, in_minutes=2)
    assert "created" in first and "created" in second
    too_often = await _create(app, cron_expression="* * * * *")
    assert "at most every 5 minutes" in too_often["error"]


async def test_toggle_pauses_and_a_passed_one_time_job_cannot_resume(app: App) -> None:
    job = (await _create(app, in_minutes=10))["created"]
    paused = await _tool(app, action="toggle", job_id=job["job_id"])
    assert paused["updated"]["enabled"] is False and "next_fires" not in paused["updated"]
    app.deps.clock.advance(minutes=20)  # type: ignore[attr-defined]
    again = await _tool(app, action="toggle", job_id=job["job_id"], enabled=True)
    assert (
        "which has passed" in again["error"] and "give a new run_at or in_minutes" in again["error"]
    )


async def test_done_jobs_cannot_be_changed_and_do_not_count_toward_the_limit(app: App) -> None:
    jobs = parts_of(app).jobs
    jobs.limits = type(jobs.limits)(max_jobs=1)
    job = (await _create(app, in_minutes=5))["created"]
    run_at = (await jobs.get(job["job_id"])).run_at
    assert run_at is not None
    assert await jobs.finish_once(job["job_id"], run_at, "success", run_at)
    for args in ({"action": "toggle"}, {"action": "update", "name": "x"}):
        error = (await _tool(app, job_id=job["job_id"], **args))["error"]
        assert "one-time job that already ran" in error and "create a new job" in error
    assert "created" in await _create(app, in_minutes=5)  # the done one does not count
    assert "already 1 cron jobs" in (await _create(app, in_minutes=5))["error"]


def test_the_tool_says_what_each_action_needs_and_stays_small() -> None:
    spec = MANAGE_CRONJOB.spec()
    text = spec.description
    for words in (
        "create: name, instruction, one of cron_expression (repeats), run_at or in_minutes",
        "update: job_id + fields to change",
        "delete: job_id",
        "toggle: job_id; enabled sets it, omitted flips it",
    ):
        assert words in text
    properties = spec.parameters["properties"]
    assert {"run_at", "in_minutes", "on_failure"} <= set(properties)
    assert properties["on_failure"]["enum"] == ["warning", "critical", "none"]
    assert count_tokens(json.dumps(spec.model_dump())) <= 330


async def test_what_people_say_through_a_scripted_model_and_the_schedule_command(
    app_db: AppDb, tmp_path: Path
) -> None:
    clock = FakeClock(NOW.astimezone(UTC))
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        tool_call(  # "every weekday at 9 check the backups, SMS me if it fails"
            "manage_cronjob", action="create", name="Backups", instruction="Check backups",
            cron_expression="0 9 * * 1-5", on_failure="critical",
        ),
        tool_call(  # "in 20 minutes remind me to call Ann"
            "manage_cronjob", action="create", name="Call Ann", instruction="Remind: call Ann",
            in_minutes=20,
        ),
        tool_call(  # "tomorrow at 8 remind me to water the plants"
            "manage_cronjob", action="create", name="Plants", instruction="Remind: plants",
            run_at="2026-11-27T08:00",
        ),
        "All set.",
    )  # fmt: skip
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        await app.agent.respond("set these up", owner_ctx(app.deps))
        out = io.StringIO()
        assert await print_schedule(app.settings, 24, out=out, clock=clock) == 0
    replies = [r["created"]["schedule"] for r in tool_results(model)]
    assert replies == [
        "repeats: every weekday at 09:00 (Europe/Berlin)",
        "runs once at 2026-11-26T14:25+01:00, then is kept as done",
        "runs once at 2026-11-27T08:00+01:00, then is kept as done",
    ]
    assert tool_results(model)[0]["created"]["on_failure"] == "critical"
    lines = out.getvalue().splitlines()
    fires = [line.split("  ", 1)[0] + " " + line.split()[-2] for line in lines if "   " in line]
    assert fires == [
        "Thu 2026-11-26 14:25 CET Ann",
        "Fri 2026-11-27 08:00 CET Plants",
        "Fri 2026-11-27 09:00 CET Backups",
    ]
