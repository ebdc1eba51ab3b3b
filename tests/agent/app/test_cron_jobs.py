"""Cron jobs end to end: the tool, runs through the agent, delivery, failures, surfaces."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.app.core import App
from agent.app.features.scheduling import SchedulingOptions
from agent.cli.upcoming import print_schedule
from agent.llm.types import ModelMessage
from channels.delivery.envelope import Envelope
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.features import providing
from tests.fakes.scripted import Request, ScriptedModel, sequence, unavailable
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.scheduling_kit import (
    call_tool,
    inbound,
    parts_of,
    scheduled_app,
    tool_call,
    tool_results,
)

OWNER = 4242
FRIDAY_EVENING = datetime(2026, 3, 6, 18, 0, tzinfo=BERLIN)


def berlin(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=BERLIN)


pytestmark = pytest.mark.clock(FRIDAY_EVENING.astimezone(UTC))


async def _create(app: App, **args: Any) -> dict[str, Any]:
    ctx = owner_ctx(app.deps, channel="console", chat_id="owner")
    args = {"name": "Backups", "instruction": "Check the backups", **args}
    result = await call_tool(app, "manage_cronjob", ctx, action="create", **args)
    assert "created" in result, result
    return result["created"]  # type: ignore[no-any-return]


async def test_invalid_expression_and_timezone_are_refused(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        tool_call(
            "manage_cronjob",
            action="create",
            name="x",
            instruction="y",
            cron_expression="0 25 * * *",
        ),
        tool_call(
            "manage_cronjob", action="create", name="x", instruction="y", cron_expression="0 9 * *"
        ),
        tool_call(
            "manage_cronjob",
            action="create",
            name="x",
            instruction="y",
            cron_expression="0 9 * * *",
            timezone="Mars/Olympus",
        ),
        model.call("manage_cronjob", action="update", job_id="nope", enabled=False),
        "sorry",
    )
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        await app.agent.respond("make a job", owner_ctx(app.deps))
        errors = [r["error"] for r in tool_results(model)]
        assert await app.deps.db["cronjobs"].count_documents({}) == 0
    assert errors[0] == "cron expression '0 25 * * *' is invalid: hour must be 0-23 (got 25)"
    assert "expected 5 fields" in errors[1] and "got 4" in errors[1]
    assert errors[2] == "unknown timezone 'Mars/Olympus'; use an IANA name such as 'Europe/Berlin'"
    assert "no cron job with id 'nope'" in errors[3]


async def test_create_defaults_to_owner_timezone_and_lists_next_three(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        job = await _create(app, cron_expression="0 9 * * 1-5")
        tokyo = await _create(app, name="T", cron_expression="@daily", timezone="Asia/Tokyo")
        listed = await call_tool(app, "manage_cronjob", action="list")
    assert job["timezone"] == "Europe/Berlin"
    assert job["schedule"] == "repeats: every weekday at 09:00 (Europe/Berlin)"
    assert job["delivers_to"] == "console:owner"
    by_id = {j["job_id"]: j for j in listed["jobs"]}
    assert by_id[job["job_id"]]["next_fires"] == [
        "2026-03-09T09:00+01:00",
        "2026-03-10T09:00+01:00",
        "2026-03-11T09:00+01:00",
    ]
    # A list shows times on the owner's clock: Tokyo's midnight is 16:00 in Berlin.
    assert by_id[tokyo["job_id"]]["next_fires"][0] == "2026-03-07T16:00+01:00"


async def test_update_toggle_delete_take_effect_at_once(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "done")
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        engine = parts_of(app).engine
        job = await _create(app, cron_expression="0 20 * * *")
        key = f"cron:{job['job_id']}"
        assert engine.armed[key] == berlin(2026, 3, 6, 21, 0)  # TIMEZONE defaults to UTC
        # The alert router changes a schedule through the same validated service.
        await app.deps.cron.update(job["job_id"], cron_expression="30 17 * * *")
        assert engine.armed[key] == berlin(2026, 3, 6, 18, 30)
        clock.advance(minutes=31)
        fires = await engine.run_due()
        assert [f.action for f in fires] == ["run"]
        off = await call_tool(app, "manage_cronjob", action="toggle", job_id=job["job_id"])
        assert off["updated"]["enabled"] is False and key not in engine.armed
        clock.advance(days=1)
        assert await engine.run_due() == []  # paused: nothing runs, nothing is recorded
        gone = await call_tool(app, "manage_cronjob", action="delete", job_id=job["job_id"])
        assert gone["deleted"] == job["job_id"]
        assert (await call_tool(app, "manage_cronjob", action="list"))["count"] == 0


def _backups_model() -> ScriptedModel:
    model = ScriptedModel(lambda r: "")

    def respond(req: Request) -> ModelMessage | str:
        last = req.messages[-1]
        if last.role == "tool":
            return "Done: every weekday at 09:00 I'll remind you."
        if "every weekday at 9" in last.text:
            return tool_call(
                "manage_cronjob",
                action="create",
                name="Backups",
                instruction="Remind the owner to check the backups.",
                cron_expression="0 9 * * 1-5",
            )
        if "Task: Remind the owner" in last.text:
            return "Time to check the backups!"
        return "?"

    model.responder = respond
    return model


@pytest.mark.every_database
async def test_every_weekday_at_9_end_to_end_through_telegram(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = _backups_model()
    async with FakeTelegram() as fake:
        channel = TelegramChannel(
            TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=0.01, cap=0.1)
        )
        async with scheduled_app(
            app_db,
            tmp_path,
            model,
            clock,
            channels=[channel],
            timezone="Europe/Berlin",
            owner_telegram_ids=[OWNER],
        ) as app:
            fake.push_text(OWNER, "every weekday at 9 remind me to check the backups")
            confirm = await fake.wait_sent(1)
            assert "every weekday at 09:00" in confirm[0].visible
            engine = parts_of(app).engine
            clock.set(berlin(2026, 3, 7, 9, 0))  # Saturday: nothing
            assert await engine.run_due() == []
            assert len(fake.sent) == 1
            clock.set(berlin(2026, 3, 9, 9, 0, 2))  # Monday 09:00
            await engine.run_due()
            sent = await fake.wait_sent(2)
            run = await app.deps.db["runs"].find_one({"kind": "cron"})
    assert sent[1].chat_id == str(OWNER)
    assert "Time to check the backups!" in sent[1].visible and "Backups" in sent[1].visible
    cron_request = model.requests[-1]
    [cron_message] = [m.text for m in cron_request.messages]
    assert cron_message.endswith("recurring (every weekday at 09:00, Europe/Berlin).\n"
                                 "Task: Remind the owner to check the backups.")  # fmt: skip
    assert "no user is present" in cron_request.system
    assert run is not None and run["status"] == "success"
    assert run["scheduled_for"] == berlin(2026, 3, 9, 9, 0)
    assert run["delivery"]["chat_id"] == str(OWNER) and run["tokens"]["input"] == 10


async def test_each_run_is_isolated_in_its_own_conversation(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    model.responder = lambda r: "" if len(model.requests) > 1 else "chat answer"
    channel = RecordingChannel()
    async with scheduled_app(app_db, tmp_path, model, clock, channels=[channel]) as app:
        await app.agent.respond("earlier chat", owner_ctx(app.deps))
        job = await _create(app, cron_expression="0 18 * * *")
        clock.set(berlin(2026, 3, 6, 19, 0, 1))
        await parts_of(app).engine.run_due()
        conv = await app.deps.db["conversations"].find_one({"key": f"cron:{job['job_id']}"})
        run = await app.deps.db["runs"].find_one({"kind": "cron"})
    assert conv is not None
    [cron_message] = [m.text for m in model.requests[-1].messages]
    assert cron_message.endswith("\nTask: Check the backups")
    assert run is not None and run["status"] == "success" and run["delivery"] is None
    assert channel.sent == []  # an empty answer is not delivered


@pytest.mark.parametrize("from_settings", [False, True], ids=["options", "CRON_TIMEOUT_SECONDS"])
async def test_timeout_cancels_the_run_and_records_timeout(
    app_db: AppDb, tmp_path: Path, clock: FakeClock, from_settings: bool
) -> None:
    asked, cancelled = asyncio.Event(), asyncio.Event()

    class StuckModel(ScriptedModel):
        """Answers never: the run's own timeout has to end it."""

        async def request(self, system: str, messages: Any, tools: Any) -> Any:
            asked.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            raise AssertionError("unreachable")

    # Long enough that a busy machine reaches the model call before it runs out.
    limit = 1.0
    channel = RecordingChannel()
    options = SchedulingOptions(timer=False, cron_timeout=None if from_settings else limit)
    configured = {"cron_timeout_seconds": limit} if from_settings else {}
    async with scheduled_app(
        app_db,
        tmp_path,
        StuckModel(lambda r: ""),
        clock,
        channels=[channel],
        options=options,
        **configured,
    ) as app:
        await _create(app, cron_expression="5 17 * * *")
        clock.advance(minutes=6)
        async with asyncio.timeout(60):  # watchdog: the run's own timeout must end it
            await parts_of(app).engine.run_due()
        run = await app.deps.db["runs"].find_one({"kind": "cron"})
    assert asked.is_set() and cancelled.is_set()  # the model call was under way, and stopped
    assert run is not None and run["status"] == "timeout"
    assert run["error"] == "timed out after 1 s; the run was cancelled"
    assert run["ended_at"] >= run["started_at"] and "duration_ms" in run
    assert channel.texts() == [
        "⚠️ Backups: this run did not complete — it timed out after 1 s and was stopped."
    ]


class Alerts:
    def __init__(self) -> None:
        self.raised: list[dict[str, Any]] = []

    async def raise_alert(self, **fields: Any) -> dict[str, Any]:
        self.raised.append(fields)
        return fields


@pytest.mark.parametrize("router", [True, False])
async def test_two_failures_in_a_row_warn_the_owner(
    app_db: AppDb, tmp_path: Path, clock: FakeClock, router: bool
) -> None:
    model = ScriptedModel(lambda r: unavailable())
    channel = RecordingChannel()
    alerts = Alerts()
    before = [providing(alerts=alerts)] if router else []
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[channel], before=before
    ) as app:
        job = await _create(app, cron_expression="0 * * * *")
        engine = parts_of(app).engine
        clock.set(berlin(2026, 3, 6, 19, 0, 1))
        await engine.run_due()
        assert alerts.raised == [] and len(channel.sent) == 1  # the failure notice only
        clock.set(berlin(2026, 3, 6, 20, 0, 1))
        await engine.run_due()
        runs = await app.deps.db["runs"].find({"kind": "cron"}).to_list()
    assert [r["status"] for r in runs] == ["failed", "failed"]
    assert runs[0]["error"] == "model unavailable: fake outage"  # what the provider said
    if router:
        assert len(alerts.raised) == 1
        warning = alerts.raised[0]
        assert warning["severity"] == "warning" and "failed 2 times in a row" in warning["title"]
        assert warning["dedupe_key"] == f"run-failures:cron:{job['job_id']}"
    else:
        warnings = [t for t in channel.texts("owner") if "failed 2 times in a row" in t]
        assert len(warnings) == 1 and "Backups" in warnings[0]


async def test_jobs_command_lists_next_fire(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        empty = await app.dispatcher.handle(Envelope(inbound("/jobs")))
        job = await _create(app, cron_expression="0 9 * * 1-5")
        replies = await app.dispatcher.handle(Envelope(inbound("/jobs")))
    assert "No cron jobs yet" in empty[0].text
    assert f"Backups [{job['job_id']}] — every weekday at 09:00 (UTC), next Mon 09:00" in (
        replies[0].text
    )


async def test_schedule_command_prints_upcoming_fires(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda r: "")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        await _create(app, cron_expression="0 9 * * *")
        await _create(app, name="Tokyo", cron_expression="0 8 * * *", timezone="Asia/Tokyo")
        await parts_of(app).pulse.update_config(enabled=True, pulses_per_day=6)
        out = io.StringIO()
        code = await print_schedule(app.settings, 24, out=out, clock=clock)
    lines = out.getvalue().splitlines()
    assert code == 0
    assert lines[0] == "Next 24 h from 2026-03-06 18:00 (Europe/Berlin)"
    assert "pulse: 6/day, every day, quiet 22:00–07:00" in lines
    fires = [line for line in lines if line.startswith(("Fri", "Sat"))]
    assert fires == [  # six a day over 07:00-22:00: every 150 minutes from 07:00
        "Fri 2026-03-06 19:30 CET  pulse",
        "Sat 2026-03-07 00:00 CET  cron   Tokyo [" + fires[1].split("[")[1],
        "Sat 2026-03-07 07:00 CET  pulse",
        "Sat 2026-03-07 09:00 CET  cron   Backups [" + fires[3].split("[")[1],
        "Sat 2026-03-07 09:30 CET  pulse",
        "Sat 2026-03-07 12:00 CET  pulse",
        "Sat 2026-03-07 14:30 CET  pulse",
        "Sat 2026-03-07 17:00 CET  pulse",
    ]
    assert clock() + timedelta(hours=24) == berlin(2026, 3, 7, 18, 0)
