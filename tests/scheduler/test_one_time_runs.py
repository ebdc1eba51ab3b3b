"""One-time jobs through the engine: run once, delivered where they were asked for, kept
as done, never again after a restart, late rather than never, pruned after 30 days."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.app.application import App
from agent.app.features.scheduling import SchedulingOptions, build_parts
from agent.cli.upcoming import print_schedule
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import call_tool, parts_of, scheduled_app
from tests.waiting import until

START = datetime(2026, 11, 26, 14, 0, tzinfo=BERLIN)
CHAT = "777"


def _answer(request: Any) -> str:
    return "Dentist at 15:00 — leave now." if "Task: Remind me" in request.messages[-1].text else ""


async def _create(app: App, **args: Any) -> dict[str, Any]:
    ctx = owner_ctx(app.deps, channel="telegram", chat_id=CHAT)
    args = {"name": "Dentist", "instruction": "Remind me of the dentist", **args}
    result = await call_tool(app, "manage_cronjob", ctx, action="create", **args)
    assert "created" in result, result
    return result["created"]  # type: ignore[no-any-return]


async def _listed(app: App) -> dict[str, Any]:
    listed = await call_tool(app, "manage_cronjob", action="list")
    return {job["job_id"]: job for job in listed["jobs"]}


async def _schedule(app: App, clock: FakeClock) -> str:
    out = io.StringIO()
    assert await print_schedule(app.settings, 24, out=out, clock=clock) == 0
    return out.getvalue()


async def test_runs_once_in_its_chat_then_is_done_and_never_again(
    app_db: AppDb, tmp_path: Path
) -> None:
    clock = FakeClock(START.astimezone(UTC))
    model = ScriptedModel(_answer)
    telegram = RecordingChannel(name="telegram")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], timezone="Europe/Berlin"
    ) as app:
        job = await _create(app, in_minutes=20)
        assert f"once   Dentist [{job['job_id']}]" in await _schedule(app, clock)
        engine = parts_of(app).engine
        clock.advance(minutes=19)
        assert await engine.run_due() == []
        clock.advance(minutes=1, seconds=5)
        assert [f.action for f in await engine.run_due()] == ["run"]
        clock.advance(hours=2)
        assert await engine.run_due() == []
        done = (await _listed(app))[job["job_id"]]
        schedule = await _schedule(app, clock)
        # A second process starting on the same database: nothing left to run.
        again, runner = build_parts(app, SchedulingOptions(timer=False))
        await again.engine.start(runner)
        try:
            clock.advance(days=1)
            assert await again.engine.run_due() == []
        finally:
            await again.engine.stop()
        runs = await app.deps.db["runs"].find({"kind": "cron"}).to_list()
    assert telegram.texts(CHAT) == ["Dentist\nDentist at 15:00 — leave now."]
    assert len(runs) == 1 and runs[0]["status"] == "success"
    prompt = model.requests[0].messages[-1].text
    assert f"Scheduled job {job['job_id']} “Dentist”, one-time" in prompt
    assert "this is its only run" in prompt
    assert done["state"] == "done" and done["last_status"] == "success"
    assert done["done_at"] == "2026-11-26T14:20+01:00" and done["enabled"] is False
    assert "next_fires" not in done and done["schedule"].startswith("ran once")
    assert "Dentist" not in schedule and "1 one-time done" in schedule


async def test_a_done_job_is_pruned_after_30_days(app_db: AppDb, tmp_path: Path) -> None:
    clock = FakeClock(START.astimezone(UTC))
    model = ScriptedModel(_answer)
    async with scheduled_app(app_db, tmp_path, model, clock) as app:
        job = await _create(app, in_minutes=1)
        engine = parts_of(app).engine
        clock.advance(minutes=2)
        await engine.run_due()
        clock.advance(days=29)
        await engine.resync()
        assert job["job_id"] in await _listed(app)
        clock.advance(days=1, minutes=1)
        await engine.resync()
        assert job["job_id"] not in await _listed(app)


async def test_missed_while_down_it_runs_once_late_and_says_so(
    app_db: AppDb, tmp_path: Path
) -> None:
    clock = FakeClock(START.astimezone(UTC))
    model = ScriptedModel(_answer)
    telegram = RecordingChannel(name="telegram")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], timezone="Europe/Berlin"
    ) as app:
        job = await _create(app, run_at="2026-11-26T15:00")
        clock.set(datetime(2026, 11, 26, 18, 30, tzinfo=BERLIN))  # down 15:00-18:30
        fires = await parts_of(app).engine.run_due()
        assert [(f.action, f.scheduled_for) for f in fires] == [
            ("run", datetime(2026, 11, 26, 14, 0, tzinfo=UTC))
        ]
        assert await parts_of(app).engine.run_due() == []
        done = (await _listed(app))[job["job_id"]]
    assert telegram.texts(CHAT) == ["Dentist (late: due Thu 15:00)\nDentist at 15:00 — leave now."]
    assert (
        "It runs late: it was due at 2026-11-26T15:00+01:00" in model.requests[0].messages[-1].text
    )
    assert done["last_status"] == "success"


class Stalling(ScriptedModel):
    """A model whose first call never returns (the process dies during the run)."""

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        if not self.requests:
            self.requests.append(None)  # type: ignore[arg-type]
            await asyncio.Event().wait()
        return await super().request(system, messages, tools)


async def test_a_run_cut_short_by_a_crash_runs_again_after_restart(
    app_db: AppDb, tmp_path: Path
) -> None:
    clock = FakeClock(START.astimezone(UTC))
    model = Stalling(_answer)
    telegram = RecordingChannel(name="telegram")
    async with scheduled_app(app_db, tmp_path, model, clock, channels=[telegram]) as app:
        job = await _create(app, in_minutes=5)
        first = parts_of(app).engine
        first.config = replace(first.config, stop_grace=0.05)
        clock.advance(minutes=5, seconds=1)
        await first.run_due(wait=False)
        await until(lambda: model.requests, "the run's model call under way")
        await first.stop()  # the run is cut off; its record stays "running"
        assert (await app.deps.db["runs"].find_one({}))["status"] == "running"  # type: ignore[index]
        clock.advance(minutes=10)
        second, runner = build_parts(app, SchedulingOptions(timer=False))
        await second.engine.start(runner)  # the first let its lease go: reclaimed at once
        try:
            fires = await second.engine.run_due()
            assert [f.action for f in fires] == ["retry"]
            await second.engine.join()
        finally:
            await second.engine.stop()
        done = (await _listed(app))[job["job_id"]]
        run = await app.deps.db["runs"].find_one({})
    # Delivered once, by the second try, 10 minutes after its time (UTC here): late.
    assert telegram.texts(CHAT) == ["Dentist (late: due Thu 13:05)\nDentist at 15:00 — leave now."]
    assert done["last_status"] == "success" and done["state"] == "done"
    assert run is not None and run["attempts"] == 2 and run["resumed"] is True


async def test_a_recurring_run_prompt_names_its_job(app_db: AppDb, tmp_path: Path) -> None:
    clock = FakeClock(START.astimezone(UTC))
    model = ScriptedModel(lambda r: "")
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        job = await _create(app, cron_expression="0 15 * * *")
        clock.set(datetime(2026, 11, 26, 15, 0, 3, tzinfo=BERLIN))
        await parts_of(app).engine.run_due()
    prompt = model.requests[-1].messages[-1].text
    assert prompt.startswith(f"Scheduled job {job['job_id']} “Dentist”, recurring (every day")
    assert prompt.endswith("Task: Remind me of the dentist")
