"""Travel (issue 32, item 3): a timezone change reports every job, and lists follow the
owner's clock.

The sequence of the issue: the owner in Berlin has a one-time "call mom at 8am"
tomorrow and a daily job, flies to New York (the reminder is now 02:00 there, inside
quiet hours, and the reply says so), on to Tokyo, and home. The one-time job keeps its
moment throughout and runs exactly then; the daily job keeps its local time on each
new clock; ``manage_cronjob`` list and ``/jobs`` show times where the owner is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import App
from channels.delivery.envelope import Envelope
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import (
    call_tool,
    inbound,
    parts_of,
    scheduled_app,
    tool_call,
    tool_results,
)

FRIDAY_EVENING = datetime(2026, 3, 6, 18, 0, tzinfo=BERLIN)
CALL_MOM = datetime(2026, 3, 7, 7, 0, tzinfo=UTC)  # Saturday 08:00 in Berlin (CET)


pytestmark = pytest.mark.clock(FRIDAY_EVENING)


async def _tool(app: App, tool: str, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call_tool(app, tool, **args)
    assert "error" not in result, result
    return result


async def _fly(app: App, timezone: str) -> dict[str, Any]:
    return await _tool(app, "manage_settings", action="update", timezone=timezone)


async def _lists(app: App) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``manage_cronjob`` list by job name, and the lines of ``/jobs``."""
    listed = await _tool(app, "manage_cronjob", action="list")
    [reply] = await app.dispatcher.handle(Envelope(inbound("/jobs")))
    return {job["name"]: job for job in listed["jobs"]}, reply.text.splitlines()


async def test_berlin_new_york_tokyo_and_home(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        mom = await _tool(
            app, "manage_cronjob", action="create", name="Call mom",
            instruction="Remind me to call mom", run_at="2026-03-07T08:00",
        )  # fmt: skip
        brief = await _tool(
            app, "manage_cronjob", action="create", name="Morning brief",
            instruction="Brief me on the day", cron_expression="0 7 * * *",
        )  # fmt: skip
        mom_id, brief_id = mom["created"]["job_id"], brief["created"]["job_id"]

        new_york = await _fly(app, "America/New_York")
        ny_jobs, ny_lines = await _lists(app)
        tokyo = await _fly(app, "Asia/Tokyo")
        tokyo_jobs, tokyo_lines = await _lists(app)
        home = await _fly(app, "Europe/Berlin")
        home_jobs, home_lines = await _lists(app)

        jobs = parts_of(app).jobs
        stored = await jobs.get(mom_id)
        engine = parts_of(app).engine
        clock.set(CALL_MOM.replace(minute=59, hour=6))
        early = await engine.run_due()
        clock.set(CALL_MOM)
        due = await engine.run_due()

    # New York: the daily job moved, the reminder kept its moment: 02:00, in quiet hours.
    assert new_york["cron_jobs_moved"] == ["Morning brief"]
    assert new_york["one_time_jobs"] == [
        {
            "job_id": mom_id,
            "name": "Call mom",
            "runs_at": "2026-03-07T02:00-05:00",
            "was": "2026-03-07T08:00+01:00",
            "in_quiet_hours": True,
        }
    ]
    assert new_york["one_time_note"].startswith(
        'One-time jobs keep their moment: "Call mom" now at Sat 02:00 America/New_York '
        "(was Sat 08:00 Europe/Berlin), inside quiet hours. Tell the owner. A job runs at "
        "its time even in quiet hours: offer to move it"
    )
    assert ny_jobs["Call mom"]["schedule"] == (
        "runs once at 2026-03-07T02:00-05:00, then is kept as done"
    )
    assert ny_jobs["Morning brief"]["next_fires"][0] == "2026-03-07T07:00-05:00"
    assert ny_lines[0] == "Cron jobs (times in America/New_York):"
    assert f"• Call mom [{mom_id}] — once, next Sat 02:00" in ny_lines
    assert (
        f"• Morning brief [{brief_id}] — every day at 07:00 (America/New_York), next Sat 07:00"
    ) in ny_lines

    # Tokyo: 16:00 there, outside quiet hours; no advice to move it.
    assert tokyo["cron_jobs_moved"] == ["Morning brief"]
    [tokyo_mom] = tokyo["one_time_jobs"]
    assert (tokyo_mom["runs_at"], tokyo_mom["in_quiet_hours"]) == ("2026-03-07T16:00+09:00", False)
    assert tokyo_mom["was"] == "2026-03-07T02:00-05:00"
    assert tokyo["one_time_note"] == (
        'One-time jobs keep their moment: "Call mom" now at 16:00 Asia/Tokyo '
        "(was Sat 02:00 America/New_York). Tell the owner."
    )
    assert tokyo_jobs["Call mom"]["schedule"].startswith("runs once at 2026-03-07T16:00+09:00")
    assert tokyo_jobs["Morning brief"]["next_fires"][0] == "2026-03-07T07:00+09:00"
    assert tokyo_lines[0] == "Cron jobs (times in Asia/Tokyo):"
    assert f"• Call mom [{mom_id}] — once, next 16:00" in tokyo_lines

    # Home: 08:00 again, as first set.
    [home_mom] = home["one_time_jobs"]
    assert (home_mom["runs_at"], home_mom["in_quiet_hours"]) == ("2026-03-07T08:00+01:00", False)
    assert home["cron_jobs_moved"] == ["Morning brief"]
    assert home_jobs["Call mom"]["schedule"].startswith("runs once at 2026-03-07T08:00+01:00")
    assert home_jobs["Morning brief"]["next_fires"][0] == "2026-03-07T07:00+01:00"
    assert f"• Call mom [{mom_id}] — once, next Sat 08:00" in home_lines

    # The moment never moved, and it runs then, once.
    assert stored.run_at == CALL_MOM and stored.timezone == "Europe/Berlin"
    assert mom_id not in [fire.job_id for fire in early]  # the brief's 07:00 came first
    assert [(f.scheduled_for, f.action) for f in due if f.job_id == mom_id] == [(CALL_MOM, "run")]


async def test_a_reminder_set_again_after_travel_is_read_on_the_new_clock(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """ "Make it 8am" in New York means 08:00 New York, not Berlin."""
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        mom = await _tool(
            app, "manage_cronjob", action="create", name="Call mom", instruction="x",
            run_at="2026-03-07T08:00",
        )  # fmt: skip
        await _fly(app, "America/New_York")
        moved = await _tool(
            app, "manage_cronjob", action="update", job_id=mom["created"]["job_id"],
            run_at="2026-03-07T08:00",
        )  # fmt: skip
        stored = await parts_of(app).jobs.get(mom["created"]["job_id"])
    assert moved["updated"]["schedule"].startswith("runs once at 2026-03-07T08:00-05:00")
    assert stored.run_at == datetime(2026, 3, 7, 13, 0, tzinfo=UTC)


async def test_jobs_on_their_own_timezone_are_reported_kept(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """A job the owner set on Tokyo time stays there; lists show its times at home."""
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        await _tool(
            app, "manage_cronjob", action="create", name="Tokyo standup", instruction="x",
            cron_expression="0 9 * * *", timezone="Asia/Tokyo",
        )  # fmt: skip
        reply = await _fly(app, "America/New_York")
        jobs, lines = await _lists(app)
    assert reply["cron_jobs_moved"] == [] and "one_time_jobs" not in reply
    assert reply["cron_jobs_kept"] == ["Tokyo standup (Asia/Tokyo)"]
    standup = jobs["Tokyo standup"]
    assert standup["timezone"] == "Asia/Tokyo"
    assert standup["schedule"] == "repeats: every day at 09:00 (Asia/Tokyo)"
    assert standup["next_fires"][0] == "2026-03-06T19:00-05:00"  # 09:00 Saturday in Tokyo
    assert any(line.endswith("every day at 09:00 (Asia/Tokyo), next 19:00") for line in lines), (
        lines
    )


async def test_the_model_hears_of_the_reminder_when_the_owner_travels(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """The owner says where they are; the tool result the model reads names the
    reminder at its new time and says it falls in quiet hours."""
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        await _tool(
            app, "manage_cronjob", action="create", name="Call mom", instruction="x",
            run_at="2026-03-07T08:00",
        )  # fmt: skip
        model.responder = sequence(
            tool_call("manage_settings", action="update", timezone="America/New_York"),
            "Done.",
        )
        await app.agent.respond("I just landed in New York", owner_ctx(app.deps))
    [result] = tool_results(model)
    assert (
        "Call mom" in result["one_time_note"]
        and "Sat 02:00 America/New_York" in (result["one_time_note"])
    )
    assert result["one_time_jobs"][0]["in_quiet_hours"] is True
