"""``manage_settings`` through the app: replies, errors, who gets it, and what a change
does (the pulse grid, cron jobs' timezone, the run's clock)."""

from __future__ import annotations

import contextlib
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent.app.application import App
from agent.cli.upcoming import print_schedule
from agent.conversation.prompt import format_now
from tests.contexts import contact_ctx, owner_ctx
from tests.databases import AppDb
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import call_tool, parts_of, scheduled_app, tool_call, tool_results

FRIDAY_EVENING = datetime(2026, 3, 6, 18, 0, tzinfo=BERLIN)


pytestmark = pytest.mark.clock(FRIDAY_EVENING)


def _app(
    app_db: AppDb,
    tmp_path: Path,
    clock: FakeClock,
    model: ScriptedModel | None = None,
    **kw: Any,
) -> contextlib.AbstractAsyncContextManager[App]:
    model = model or ScriptedModel(lambda _r: "ok")
    return scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin", **kw)


async def _settings(app: App, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call_tool(app, "manage_settings", **args)
    return result


async def test_get_shows_the_defaults_in_the_owners_time(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock) as app:
        view = await _settings(app, action="get")
    assert view.pop("spend") == {
        "tokens_today": 0,
        "daily_token_limit": 1_000_000,
        "usd_today": "$0.00",
        "usd_this_month": "$0.00",
        "budget_resets_at": "2026-03-07T00:00:00+01:00",  # the owner's midnight
    }
    assert view == {
        "timezone": "Europe/Berlin",
        "local_time": "2026-03-06T18:00+01:00",
        "quiet_hours": [{"start": "22:00", "end": "07:00"}],
        "primary_channel": None,
        "configured_channels": [],
        "warning_sms_after_minutes": 30,
        "warning_sms": "a warning not acknowledged within 30 min is sent again as a reminder "
        "on every chat (SMS is not set up)",
        "quiet_now": False,
        "quiet": "during quiet hours info and warning alerts are held and delivered when "
        "quiet hours end, and the pulse waits; critical alerts, cron jobs and one-time "
        "reminders are delivered at their time",
    }


async def test_get_answers_how_much_was_spent_today_and_this_month(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock, daily_token_budget=2_000_000) as app:
        budget = app.deps.budget
        clock.set(datetime(2026, 3, 2, 9, 0, tzinfo=BERLIN))  # earlier this month
        await budget.record("chat", "gpt-4.1-mini", 1_000_000, 0, first=True)  # $0.40
        clock.set(FRIDAY_EVENING)
        await budget.record("chat", "gpt-4.1-mini", 1_000_000, 100_000, first=True)  # $0.56
        await budget.record("pulse", "my-local", 1_000, 0, first=True)  # default price
        spend = (await _settings(app, action="get"))["spend"]
    assert spend == {
        "tokens_today": 1_101_000,
        "daily_token_limit": 2_000_000,
        "usd_today": "~$0.5620",
        "usd_this_month": "~$0.9620",
        "budget_resets_at": "2026-03-07T00:00:00+01:00",
        "estimated_for": ["my-local"],
    }


async def test_update_while_quiet_says_until_when(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock) as app:
        reply = await _settings(
            app, action="update", quiet_hours=[{"start": "17:30", "end": "7:00"}]
        )
        again = await _settings(app, action="get")
    assert reply["success"] is True
    assert reply["quiet_hours"] == [{"start": "17:30", "end": "07:00"}]
    assert reply["quiet_now"] is True and reply["quiet_until"] == "2026-03-07T07:00+01:00"
    assert reply["quiet"].startswith("quiet now until 07:00: info and warning alerts are held")
    assert again["quiet_hours"] == reply["quiet_hours"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            {"quiet_hours": [{"start": "22:00", "end": "24:30"}]},
            "quiet_hours[0].end '24:30': hour must be 0-23. Nothing was changed.",
        ),
        (
            {"timezone": "Berlin", "quiet_hours": []},
            "unknown timezone 'Berlin'; use an IANA name such as 'Europe/Berlin'. "
            "Nothing was changed.",
        ),
        (
            {"primary_channel": "email"},
            "primary_channel 'email' is not a channel; use one of telegram, whatsapp, sms. "
            "Nothing was changed.",
        ),
        (
            {"warning_sms_after_minutes": 10081},
            "warning_sms_after_minutes 10081 is out of range: 0 (warnings never go by SMS) "
            "to 10080 (a week). Nothing was changed.",
        ),
        (
            {"warning_sms_after_minutes": -1, "timezone": "UTC"},
            "warning_sms_after_minutes -1 is out of range: 0 (warnings never go by SMS) "
            "to 10080 (a week). Nothing was changed.",
        ),
        (
            {},
            "update needs one or more of quiet_hours, timezone, primary_channel, "
            "warning_sms_after_minutes",
        ),
    ],
)
async def test_bad_values_are_refused_by_name_and_nothing_changes(
    app_db: AppDb, tmp_path: Path, clock: FakeClock, args: dict[str, Any], error: str
) -> None:
    async with _app(app_db, tmp_path, clock) as app:
        reply = await _settings(app, action="update", **args)
        view = await _settings(app, action="get")
    assert reply == {"error": error}
    assert view["quiet_hours"] == [{"start": "22:00", "end": "07:00"}]
    assert view["timezone"] == "Europe/Berlin"


async def test_a_window_without_end_is_a_schema_error(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock) as app:
        reply = await _settings(app, action="update", quiet_hours=[{"start": "22:00"}])
    assert "quiet_hours.0.end: Field required" in reply["error"]


async def test_only_the_owner_gets_it_and_not_the_pulse(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock) as app:
        deps = app.deps
        assert "manage_settings" in app.catalog.for_context(owner_ctx(deps))
        assert "manage_settings" in app.catalog.for_context(owner_ctx(deps, kind="cron"))
        assert "manage_settings" not in app.catalog.for_context(owner_ctx(deps, kind="pulse"))
        contact = contact_ctx(deps)
        assert "manage_settings" not in app.catalog.for_context(contact)
        refused = await call_tool(app, "manage_settings", contact, action="update", timezone="UTC")
        assert refused["error"].startswith("unknown tool 'manage_settings'")
        assert (await _settings(app, action="get"))["timezone"] == "Europe/Berlin"


async def test_a_new_timezone_moves_the_jobs_on_the_old_one_and_the_runs_clock(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock) as app:
        jobs = parts_of(app).jobs
        home = await jobs.create(name="Home", instruction="a", cron_expression="0 9 * * *")
        tokyo = await jobs.create(
            name="Tokyo", instruction="b", cron_expression="0 9 * * *", timezone="Asia/Tokyo"
        )
        ctx = owner_ctx(app.deps)
        assert format_now(ctx).endswith("18:00 (Europe/Berlin)")
        reply = await _settings(app, action="update", timezone="America/New_York")
        moved, kept = await jobs.get(home.id), await jobs.get(tokyo.id)
        assert ctx.tz == ZoneInfo("America/New_York") and parts_of(app).pulse.tz == ctx.tz
        assert format_now(ctx) == "Friday 06 March 2026, 12:00 (America/New_York)"
        new_job = await call_tool(
            app, "manage_cronjob", action="create", name="N", instruction="c",
            cron_expression="0 8 * * *",
        )  # fmt: skip
    assert reply["cron_jobs_moved"] == ["Home"]
    assert reply["cron_jobs_kept"] == ["Tokyo (Asia/Tokyo)"]
    assert reply["local_time"] == "2026-03-06T12:00-05:00"
    assert moved.timezone == "America/New_York" and kept.timezone == "Asia/Tokyo"
    assert moved.next_fire_at == datetime(2026, 3, 7, 14, tzinfo=UTC)  # 09:00 EST
    assert kept.next_fire_at == tokyo.next_fire_at
    assert new_job["created"]["timezone"] == "America/New_York"


async def test_pulses_keep_out_of_quiet_hours_set_by_the_owner(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """ "Don't bother me 12-22", then twelve pulses a day: none in those hours."""
    model = ScriptedModel(lambda _r: "ok")
    model.responder = sequence(
        tool_call(
            "manage_settings", action="update", quiet_hours=[{"start": "12:00", "end": "22:00"}]
        ),
        tool_call("manage_pulse", action="update_config", pulses_per_day=12),
        "Done: quiet 12:00-22:00, twelve pulses outside it.",
    )
    async with _app(app_db, tmp_path, clock, model, pulse=True) as app:
        await parts_of(app).pulse.update_notes("watch the build")
        await app.agent.respond(
            "don't bother me 12-22, and pulse twelve times a day", owner_ctx(app.deps)
        )
        assert all("error" not in r for r in tool_results(model))
        model.responder = lambda _r: "nothing new"
        engine = parts_of(app).engine
        for _ in range(24 * 12):  # a day in five-minute steps
            clock.advance(minutes=5)
            await engine.run_due()
        runs = await app.deps.db["runs"].find({"kind": "pulse"}).to_list()
    hours = sorted(r["scheduled_for"].astimezone(BERLIN).hour for r in runs)
    assert len(runs) == 12
    assert all(h < 12 or h >= 22 for h in hours), hours


async def test_watchkeeper_schedule_reads_the_owners_settings(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with _app(app_db, tmp_path, clock, pulse=True) as app:
        quiet = [{"start": "23:00", "end": "06:00"}]
        await _settings(app, action="update", quiet_hours=quiet, timezone="Asia/Tokyo")
        out = io.StringIO()
        assert await print_schedule(app.settings, 24, out=out, clock=clock) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "Next 24 h from 2026-03-07 02:00 (Asia/Tokyo)"
    assert "quiet 23:00–06:00" in lines[1]
    pulses = [line for line in lines if line.endswith("pulse")]
    assert pulses and all(line.split()[2] >= "06:00" for line in pulses[:3])
