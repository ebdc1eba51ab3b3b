"""A timezone change set for later (issue 40, items 1 and 10): "I'm flying to New York
tomorrow" is kept as a pending change, made at its moment by the scheduler (surviving a
restart), told to the owner with the jobs it moved; job lists say which jobs follow
the owner's zone and when they fire, before and after the change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import App
from agent.app.features.scheduling import SchedulingOptions, build_parts
from channels.delivery.envelope import Envelope
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
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

THURSDAY_EVENING = datetime(2026, 11, 26, 20, 0, tzinfo=BERLIN)
TAKE_OFF = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)  # Friday 10:00 in Berlin
CHAT = "777"
WEATHER = "Weekday weather"

pytestmark = pytest.mark.clock(THURSDAY_EVENING)


def _ctx(app: App) -> Any:
    return owner_ctx(app.deps, channel="telegram", chat_id=CHAT)


async def _tool(app: App, tool: str, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = await call_tool(app, tool, _ctx(app), **args)
    assert "error" not in result, result
    return result


async def _weather_job(app: App) -> str:
    created = await _tool(
        app, "manage_cronjob", action="create", name=WEATHER,
        instruction="Tell me the weather", cron_expression="30 8 * * 1-5",
    )  # fmt: skip
    job_id: str = created["created"]["job_id"]
    return job_id


async def _listed(app: App, name: str = WEATHER) -> dict[str, Any]:
    listed = await _tool(app, "manage_cronjob", action="list")
    [job] = [job for job in listed["jobs"] if job["name"] == name]
    return job  # type: ignore[no-any-return]


async def test_flying_to_new_york_tomorrow_and_the_weather_message(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """The travel sequence, played through the tools the model calls."""
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], timezone="Europe/Berlin"
    ) as app:
        job_id = await _weather_job(app)
        engine = parts_of(app).engine

        fly = tool_call(
            "manage_settings", action="update", timezone="America/New_York",
            effective_at="2026-11-27T10:00",
        )  # fmt: skip
        model.responder = sequence(fly, "From tomorrow 10:00 you are on New York time.")
        await app.agent.respond("I'm flying to New York tomorrow", _ctx(app))
        model.responder = sequence(
            tool_call("manage_cronjob", action="list"),
            "Tomorrow 08:30 Berlin; from Monday 08:30 New York.",
        )
        await app.agent.respond("What time will the weekday weather message come now?", _ctx(app))
        [flying, before] = tool_results(model)
        asked = [m for r in model.requests for m in r.messages if m.text.startswith("What time")]
        note = asked[0].note
        armed = dict(engine.armed)
        [jobs_reply] = await app.dispatcher.handle(Envelope(inbound("/jobs")))

        # Friday 08:30 Berlin: still on the Berlin clock.
        model.responder = lambda _r: "Sunny, 12°C"
        clock.set(datetime(2026, 11, 27, 7, 30, tzinfo=UTC))
        friday = await engine.run_due()
        clock.set(TAKE_OFF)
        assert await engine.run_due() == []  # the change is not a run
        told = telegram.texts(CHAT)
        settings = await _tool(app, "manage_settings", action="get")
        after = await _listed(app)
        # Friday 08:30 in New York it fires again; on Monday 08:30 in Berlin passes
        # quietly, and 08:30 in New York it fires.
        clock.set(datetime(2026, 11, 27, 13, 30, tzinfo=UTC))
        new_york_friday = await engine.run_due()
        clock.set(datetime(2026, 11, 30, 7, 30, tzinfo=UTC))
        berlin_monday = await engine.run_due()
        clock.set(datetime(2026, 11, 30, 13, 30, tzinfo=UTC))
        new_york_monday = await engine.run_due()

    # The change is pending, and the result says when and how effective_at was read.
    assert "success" in flying and flying["timezone"] == "Europe/Berlin"
    assert "unchanged" not in flying
    pending = flying["pending_timezone"]
    assert pending["timezone"] == "America/New_York"
    assert pending["effective_at"] == "Fri 27 Nov 10:00 (Europe/Berlin)"
    assert WEATHER in pending["then"]
    assert flying["note"] == (
        "Not changed yet: set for Fri 27 Nov 10:00 (Europe/Berlin) (effective_at read in "
        "Europe/Berlin, no offset). To cancel: timezone Europe/Berlin."
    )
    assert armed["zone"] == TAKE_OFF
    assert (
        "Now: Thursday 26 November 2026, 20:00 (Europe/Berlin); America/New_York from "
        "Fri 27 Nov 10:00"
    ) in note  # the next message's note says it too

    # Before the change: the job follows the owner; Friday at 08:30 Berlin, then 08:30
    # New York (later the same day, after the change) and on.
    [weather] = [job for job in before["jobs"] if job["job_id"] == job_id]
    assert weather["zone"] == (
        "follows owner (Europe/Berlin; America/New_York from Fri 27 Nov 10:00 (Europe/Berlin))"
    )
    assert weather["next"] == [
        "Fri 27 Nov 08:30 (Europe/Berlin)",
        "Fri 27 Nov 08:30 (America/New_York)",
        "Mon 30 Nov 08:30 (America/New_York)",
    ]
    assert weather["next_fires"][:2] == ["2026-11-27T08:30+01:00", "2026-11-27T08:30-05:00"]
    assert [(f.job_id, f.action) for f in friday] == [(job_id, "run")]
    assert jobs_reply.text.splitlines()[-1] == (
        "Jobs in (Europe/Berlin) follow your timezone; others keep their own. From Fri 27 "
        "Nov 10:00 (Europe/Berlin) you are on America/New_York: they move then."
    )

    # At 10:00 Berlin the zone changed and the owner heard which jobs moved.
    assert told[-1] == (
        "🌍 Your timezone is now America/New_York (was Europe/Berlin), as planned. "
        "Moved with you, same local times: Weekday weather (next 08:30)."
    )
    assert settings["timezone"] == "America/New_York" and "pending_timezone" not in settings
    assert after["zone"] == "follows owner (America/New_York)"
    assert after["next"][:2] == [
        "Fri 27 Nov 08:30 (America/New_York)",
        "Mon 30 Nov 08:30 (America/New_York)",
    ]
    assert [(f.job_id, f.action) for f in new_york_friday] == [(job_id, "run")]
    assert berlin_monday == []
    assert [(f.job_id, f.action) for f in new_york_monday] == [(job_id, "run")]


async def test_a_pending_change_survives_a_restart(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """The change is stored, not held in memory: another scheduler started after it was
    set (a restart) makes it at its moment, once, and tells the owner once."""
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], timezone="Europe/Berlin"
    ) as app:
        await _weather_job(app)
        await _tool(
            app, "manage_settings", action="update", timezone="America/New_York",
            effective_at="2026-11-27T10:00",
        )  # fmt: skip
        again, runner = build_parts(app, SchedulingOptions(timer=False))
        await again.engine.start(runner)
        try:
            armed = dict(again.engine.armed)
            clock.set(TAKE_OFF)
            await again.engine.run_due()
            await parts_of(app).engine.run_due()  # the first process finds it made
        finally:
            await again.engine.stop()
        stored = await app.deps.db["settings"].find_one({"_id": "owner"})
        job = await _listed(app)
    assert armed["zone"] == TAKE_OFF
    assert stored is not None and stored["timezone"] == "America/New_York"
    assert "pending_zone" not in stored
    assert [t for t in telegram.texts(CHAT) if "timezone is now" in t] == [
        "🌍 Your timezone is now America/New_York (was Europe/Berlin), as planned. "
        "Moved with you, same local times: Weekday weather (next 08:30)."
    ]
    assert job["zone"] == "follows owner (America/New_York)"


async def test_pending_change_replaced_cancelled_and_refused(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """A new effective_at replaces the pending change; the current zone cancels it;
    a time past, more than a year ahead, or without a timezone is refused, nothing
    changed."""
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        await _weather_job(app)
        settings = "manage_settings"
        first = await _tool(
            app, settings, action="update", timezone="America/New_York",
            effective_at="2026-11-27T10:00",
        )  # fmt: skip
        later = await _tool(
            app, settings, action="update", timezone="Asia/Tokyo",
            effective_at="2026-11-28T06:00-05:00",
        )  # fmt: skip
        shown = await _tool(app, settings, action="get")
        past = await call_tool(
            app, settings, action="update", timezone="Asia/Tokyo",
            effective_at="2026-11-26T19:00",
        )  # fmt: skip
        far = await call_tool(
            app, settings, action="update", timezone="Asia/Tokyo",
            effective_at="2028-01-01T10:00",
        )  # fmt: skip
        alone = await call_tool(app, settings, action="update", effective_at="2026-11-27T10:00")
        still = await _tool(app, settings, action="get")
        cancelled = await _tool(app, settings, action="update", timezone="Europe/Berlin")
        gone = await _tool(app, settings, action="get")
        armed = dict(parts_of(app).engine.armed)
        keeps = await _tool(
            app, "manage_cronjob", action="create", name="Tokyo standup", instruction="x",
            cron_expression="0 9 * * *", timezone="Asia/Tokyo",
        )  # fmt: skip

    assert first["pending_timezone"]["timezone"] == "America/New_York"
    assert later["pending_timezone"] == shown["pending_timezone"]
    assert shown["pending_timezone"]["timezone"] == "Asia/Tokyo"
    # 06:00 in New York is 12:00 in Berlin; the offset given was used.
    assert shown["pending_timezone"]["effective_at"] == "Sat 28 Nov 12:00 (Europe/Berlin)"
    assert "(effective_at read in its offset)" in later["note"]
    assert later["note"].endswith(
        "Replaces America/New_York from Fri 27 Nov 10:00 (Europe/Berlin)."
    )
    assert past["error"].startswith("effective_at '2026-11-26T19:00' is not in the future")
    assert "it is now 2026-11-26T20:00+01:00 in Europe/Berlin" in past["error"]
    assert far["error"].startswith("effective_at '2028-01-01T10:00' is more than a year ahead")
    assert alone["error"].startswith("effective_at says when a timezone change happens")
    assert still["pending_timezone"] == shown["pending_timezone"]  # nothing changed
    dropped = "Asia/Tokyo from Sat 28 Nov 12:00 (Europe/Berlin)"
    assert cancelled["pending_timezone_dropped"] == dropped
    assert cancelled["unchanged"] == ["timezone"] and "pending_timezone" not in gone
    assert "zone" not in armed
    assert keeps["created"]["zone"] == "keeps Asia/Tokyo"
    assert keeps["created"]["next"][0] == "Fri 27 Nov 01:00 (Europe/Berlin)"


async def test_a_change_cut_off_by_a_stop_is_finished_at_the_next_start(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """A process that made the change and stopped before the jobs moved and the owner
    was told: the next start moves them and sends the message written with the change."""
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], timezone="Europe/Berlin"
    ) as app:
        job_id = await _weather_job(app)
        await _tool(
            app, "manage_settings", action="update", timezone="America/New_York",
            effective_at="2026-11-27T10:00",
        )  # fmt: skip
        clock.set(TAKE_OFF)
        made = await app.deps.owner.apply_pending(TAKE_OFF, "Now on New York time.")
        cut_off = await parts_of(app).jobs.get(job_id)
        again, runner = build_parts(app, SchedulingOptions(timer=False))
        await again.engine.start(runner)
        try:
            await again.engine.run_due()
        finally:
            await again.engine.stop()
        moved = await parts_of(app).jobs.get(job_id)
        stored = await app.deps.db["settings"].find_one({"_id": "owner"})
    assert made and cut_off.timezone == "Europe/Berlin"  # the stop came here
    assert moved.timezone == "America/New_York"
    assert telegram.texts(CHAT) == ["Now on New York time."]
    assert stored is not None and "zone_moving" not in stored and "pending_zone" not in stored
