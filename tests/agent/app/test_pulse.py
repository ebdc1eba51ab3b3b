"""The pulse through the app: grid, quiet hours, days, cap, idle skip, notes, surfaces."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.app.core import App
from agent.app.features.scheduling import SchedulingOptions
from agent.app.http import make_web_app
from channels.delivery.envelope import Envelope
from storage.repos.alert_record import Alert
from tests.contexts import contact_ctx, owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.features import providing
from tests.fakes.scripted import Request, ScriptedModel, sequence
from tests.scheduling_kit import (
    call_tool,
    inbound,
    parts_of,
    scheduled_app,
    tool_call,
    tool_results,
)
from tests.tokens import count_tokens

FRIDAY_EVENING = datetime(2026, 3, 6, 18, 0, tzinfo=BERLIN)


def berlin(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=BERLIN)


pytestmark = pytest.mark.clock(FRIDAY_EVENING.astimezone(UTC))


def _app(app_db: AppDb, tmp_path: Path, model: ScriptedModel, clock: FakeClock, **kw: Any):  # type: ignore[no-untyped-def]
    return scheduled_app(app_db, tmp_path, model, clock, pulse=True, timezone="Europe/Berlin", **kw)


async def _configure(app: App, **settings: Any) -> dict[str, Any]:
    """``manage_pulse`` update_config; ``quiet_hours`` go through ``manage_settings``."""
    if "quiet_hours" in settings:
        quiet = settings.pop("quiet_hours")
        done = await call_tool(app, "manage_settings", action="update", quiet_hours=quiet)
        assert done.get("success"), done
    result = await call_tool(app, "manage_pulse", action="update_config", **settings)
    assert result.get("success"), result
    return result["pulse"]  # type: ignore[no-any-return]


async def _walk(app: App, clock: FakeClock, hours: float, step_minutes: int = 5) -> None:
    """Move time forward in small steps, letting the engine do what is due."""
    engine = parts_of(app).engine
    for _ in range(int(hours * 60 / step_minutes)):
        clock.advance(minutes=step_minutes)
        await engine.run_due()


async def _pulse_runs(app: App, status: str | None = None) -> list[dict[str, Any]]:
    query: dict[str, Any] = {"kind": "pulse"}
    if status:
        query["status"] = status
    return await app.deps.db["runs"].find(query, sort=[("scheduled_for", 1)]).to_list()


def _local_hours(runs: list[dict[str, Any]]) -> list[str]:
    return [r["scheduled_for"].astimezone(BERLIN).strftime("%a %H:%M") for r in runs]


async def test_grid_alignment_and_quiet_hours_across_midnight(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "nothing to report")
    async with _app(app_db, tmp_path, model, clock) as app:
        await parts_of(app).pulse.update_notes("keep an eye on the build")
        view = await _configure(
            app, pulses_per_day=12, quiet_hours=[{"start": "22:00", "end": "07:00"}]
        )
        assert view["next_pulse_at"] == "2026-03-06T18:15+01:00"
        assert view["spacing"] == "between 07:00 and 22:00, every 1 h 15 min"
        assert view["today"]["slots_left"] == [
            f"2026-03-06T{hm}+01:00" for hm in ("18:15", "19:30", "20:45")
        ]
        assert len(view["today"]["slots_passed"]) == 9
        await _walk(app, clock, 24)
        ran = await _pulse_runs(app, "success")
    assert _local_hours(ran) == [
        *["Fri 18:15", "Fri 19:30", "Fri 20:45"],
        *["Sat 07:00", "Sat 08:15", "Sat 09:30", "Sat 10:45", "Sat 12:00"],
        *["Sat 13:15", "Sat 14:30", "Sat 15:45", "Sat 17:00"],
    ]


async def test_active_days_skip_the_weekend(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with _app(app_db, tmp_path, model, clock) as app:
        await parts_of(app).pulse.update_notes("n")
        await _configure(app, pulses_per_day=6, active_days=[1, 2, 3, 4, 5], quiet_hours=[])
        await _walk(app, clock, 60, step_minutes=10)  # to Monday 06:00
        ran = await _pulse_runs(app)
    assert _local_hours(ran) == ["Fri 20:00", "Mon 00:00", "Mon 04:00"]
    assert all(r["status"] == "success" for r in ran)


async def test_stop_the_pulse_for_the_weekend_and_it_comes_back_by_itself(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with _app(app_db, tmp_path, model, clock) as app:
        await parts_of(app).pulse.update_notes("n")
        await _configure(app, pulses_per_day=6, quiet_hours=[])
        view = await _configure(app, paused_until="2026-03-09T07:00")  # Monday, Berlin
        assert view["enabled"] is True and view["paused_until"] == "2026-03-09T07:00+01:00"
        assert view["next_pulse_at"] == "2026-03-09T08:00+01:00"
        shown = await app.dispatcher.handle(Envelope(inbound("/pulse")))
        assert "paused until Mon 07:00" in shown[0].text
        await _walk(app, clock, 64, step_minutes=10)  # to Monday 10:00
        ran = await _pulse_runs(app)
        assert _local_hours(ran) == ["Mon 08:00"]
        assert "paused_until" not in (await call_tool(app, "manage_pulse", action="get_config"))
        bad = await call_tool(app, "manage_pulse", action="update_config", paused_until="soon")
        assert bad == {
            "error": "paused_until 'soon' is not an ISO 8601 time, like 2026-05-04T07:00"
        }
        far = await call_tool(
            app, "manage_pulse", action="update_config", paused_until="2027-03-09T07:00"
        )
        assert far["error"].startswith("paused_until is at most 90 days ahead")


async def test_daily_cap_is_enforced_and_resets_at_local_midnight(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with _app(app_db, tmp_path, model, clock) as app:
        await _configure(app, pulses_per_day=2, quiet_hours=[])
        await parts_of(app).pulse.update_notes("invoice due")
        first = await call_tool(app, "manage_pulse", action="run_now")
        second = await call_tool(app, "manage_pulse", action="run_now")
        third = await call_tool(app, "manage_pulse", action="run_now")
        assert [first["run"]["status"], second["run"]["status"]] == ["success", "success"]
        assert third["run"]["status"] == "skipped" and "daily cap" in third["run"]["error"]
        # Midnight in Berlin is 23:00 UTC: the 00:00 slot is a new day.
        clock.set(berlin(2026, 3, 7, 0, 0, 5))
        await parts_of(app).engine.run_due()
        state = await call_tool(app, "manage_pulse", action="get_config")
        ran = await _pulse_runs(app)
    assert [r["status"] for r in ran][-1] == "success"
    assert state["done_today"] == 1 and state["remaining_today"] == 1
    assert len(model.requests) == 3


async def test_an_idle_pulse_makes_no_model_call(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "should not be asked")
    async with _app(app_db, tmp_path, model, clock) as app:
        await _configure(app, pulses_per_day=24, quiet_hours=[])
        clock.set(berlin(2026, 3, 6, 19, 0, 3))
        await parts_of(app).engine.run_due()
        runs = await _pulse_runs(app)
        state = await parts_of(app).pulse.get()
    assert model.requests == []
    assert [r["status"] for r in runs] == ["skipped"]
    assert runs[0]["error"] == "idle: no notes, nothing new, nothing due"
    assert state.done_today == 0 and state.last_check_at == clock()


async def test_the_pulse_gets_a_light_isolated_brief(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    class Alerts:
        async def open_alerts(self) -> list[Alert]:
            return [Alert(None, "k7", "warning", "Disk 91% full", "open", clock())]

    model = ScriptedModel(lambda r: "chat reply")
    async with _app(app_db, tmp_path, model, clock, before=[providing(alerts=Alerts())]) as app:
        await _configure(app, pulses_per_day=24, quiet_hours=[])
        await app.agent.respond("a private chat message", owner_ctx(app.deps))
        await call_tool(
            app,
            "manage_cronjob",
            action="create",
            name="Weather",
            instruction="Check the weather",
            cron_expression="30 19 * * *",
        )
        clock.set(berlin(2026, 3, 6, 18, 30))
        await app.pipeline.submit(inbound("hello?", received_at=clock()))
        await app.pipeline.join()
        clock.set(berlin(2026, 3, 6, 19, 0, 3))
        await parts_of(app).engine.run_due()
        pulse_request = model.requests[-1]
    assert [m.role for m in pulse_request.messages] == ["user"]  # no chat history
    brief = pulse_request.messages[0].text
    assert "a private chat message" not in brief
    assert "## Your notes\n(none)" in brief
    assert "#k7 warning: Disk 91% full" in brief
    assert "19:30 Weather" in brief and "Check the weather" in brief
    assert "new message(s)" not in brief  # the owner's own chat is no news
    assert "no user is present" in pulse_request.system
    assert "## Pulse\nPulse: on, 24/day round the clock from 00:00, every 1 h" in (
        pulse_request.messages[0].note  # it changes with every pulse
    )


async def test_notes_and_settings_written_during_a_pulse_survive(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        tool_call("manage_pulse", action="update_notes", notes="deploy done; check logs"),
        tool_call("manage_pulse", action="update_config", pulses_per_day=6),
        "noted",
    )
    async with _app(app_db, tmp_path, model, clock) as app:
        await _configure(app, pulses_per_day=12, quiet_hours=[])
        await parts_of(app).pulse.update_notes("watch the deploy")
        clock.set(berlin(2026, 3, 6, 20, 0, 1))
        await parts_of(app).engine.run_due()
        state = await parts_of(app).pulse.get()
        runs = await _pulse_runs(app)
    assert "watch the deploy" in model.requests[0].messages[0].text
    assert state.notes == "deploy done; check logs" and state.pulses_per_day == 6
    assert state.done_today == 1 and state.last_pulse_at == berlin(2026, 3, 6, 20, 0, 1)
    assert runs[0]["status"] == "success" and runs[0]["result"] == "noted"
    assert runs[0]["tool_calls"] == ["manage_pulse", "manage_pulse"]


async def test_invalid_settings_and_long_notes_are_refused(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        tool_call("manage_pulse", action="update_config", pulses_per_day=0),
        tool_call(
            "manage_pulse", action="update_config", quiet_hours=[{"start": "25:00", "end": "07:00"}]
        ),
        tool_call("manage_pulse", action="update_config", quiet_hours=[{"start": "22:00"}]),
        tool_call("manage_pulse", action="update_config", active_days=[7]),
        tool_call("manage_pulse", action="update_notes", notes="x" * 2001),
        "ok",
    )
    async with _app(app_db, tmp_path, model, clock) as app:
        await parts_of(app).pulse.update_notes("old notes")
        await app.agent.respond("tune the pulse", owner_ctx(app.deps))
        state = await parts_of(app).pulse.get()
    errors = [r["error"] for r in tool_results(model)]
    assert errors[0] == "pulses_per_day must be a whole number from 1 to 48 (got 0)"
    # Quiet hours left manage_pulse: both calls that still send them are told where they
    # went, in the same words (shown once here: ``tool_results`` drops repeats).
    assert "set them with manage_settings" in errors[1] and "Nothing was changed" in errors[1]
    assert "active_days contains 7" in errors[2]
    assert errors[3].startswith("notes are 2001 characters; the limit is 2000.")
    assert state.notes == "old notes" and state.pulses_per_day == 12


ADMIN = "adm1n-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def test_run_now_status_commands_and_api(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "all quiet")
    async with _app(app_db, tmp_path, model, clock, admin_token=ADMIN) as app:
        status = await app.dispatcher.handle(Envelope(inbound("/pulse")))
        ran = await app.dispatcher.handle(Envelope(inbound("/pulse run")))
        client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
        await client.start_server()
        try:
            denied = await client.post("/api/pulse/run")
            resp = await client.post("/api/pulse/run", headers=AUTH)
            body = await resp.json()
            info = await (await client.get("/api/status", headers=AUTH)).json()
        finally:
            await client.close()
        inside = await call_tool(
            app, "manage_pulse", owner_ctx(app.deps, kind="pulse"), action="run_now"
        )
    assert status[0].text.startswith(
        "Pulse: on, 12/day between 07:00 and 22:00, every 1 h 15 min, every day.\n"
    )
    assert "done today 0/12, last never, next 18:15." in status[0].text
    assert ran[0].text.startswith("pulse success in") and "all quiet" in ran[0].text
    assert denied.status == 401
    assert resp.status == 200 and body["kind"] == "pulse" and body["status"] == "success"
    assert body["trigger"] == "api" and body["result"] == "all quiet" and body["id"]
    assert info["pulse"]["done_today"] == 2 and info["cron_jobs"] == []
    assert inside == {"error": "run_now is not available inside a pulse"}


async def test_a_pulse_reaches_the_owner_with_send_message(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        tool_call("send_message", channel="telegram", to="owner", text="The build is red."),
        "told the owner",
    )
    async with _app(
        app_db, tmp_path, model, clock, channels=[telegram], owner_telegram_ids=[99]
    ) as app:
        run = await parts_of(app).engine.run_pulse_now("manual")
    assert telegram.texts("99") == ["The build is red."]
    assert run.status == "success" and run.result == "told the owner"


async def test_a_non_idle_pulse_request_is_small(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "ok")
    async with _app(app_db, tmp_path, model, clock) as app:
        await parts_of(app).pulse.update_notes("Follow up on the invoice from ACME. " * 20)
        await parts_of(app).engine.run_pulse_now("manual")
    request: Request = model.requests[0]
    tokens = count_tokens(request.system) + sum(
        count_tokens(m.text) + count_tokens(m.note) for m in request.messages
    )
    tokens += count_tokens(json.dumps([t.model_dump() for t in request.tools]))
    assert tokens <= 3_000, tokens
    assert {"manage_pulse", "manage_cronjob"} <= set(request.tool_names)


async def test_pulse_timeout_is_configurable(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    options = SchedulingOptions(timer=False, pulse_timeout=42.0)
    async with _app(app_db, tmp_path, ScriptedModel(lambda r: "ok"), clock, options=options) as app:
        assert parts_of(app).runner.config.pulse_timeout == 42.0
        assert parts_of(app).runner.config.cron_timeout == 120.0


async def test_send_message_refuses_what_it_cannot_send(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    telegram = RecordingChannel(name="telegram")
    async with _app(
        app_db, tmp_path, ScriptedModel(lambda r: ""), clock, channels=[telegram]
    ) as app:
        no_sms = await call_tool(app, "send_message", channel="sms", to="owner", text="hi")
        no_owner = await call_tool(app, "send_message", channel="telegram", to="owner", text="x")
        bad_id = await call_tool(app, "send_message", channel="telegram", to="@bob", text="x")
        sent = await call_tool(app, "send_message", channel="telegram", to="-100123", text="x")
        contact = contact_ctx(app.deps)
        offered = app.catalog.for_context(contact).names
    assert no_sms == {"error": "channel 'sms' is not running (running: telegram)"}
    assert "OWNER_TELEGRAM_IDS is not set" in no_owner["error"]
    assert "numeric Telegram chat id" in bad_id["error"]
    # A chat that is not the owner's is held until the owner confirms (DESIGN.md, limits).
    assert sent["queued"] is False and sent["needs_owner_confirmation"] is True
    assert telegram.texts("-100123") == []
    assert "send_message" not in offered and "manage_cronjob" not in offered
