"""The scheduling feature: cron jobs and the pulse, wired into the app.

Builds the stores, the engine and the runner once, registers what the owner and the
model see (``manage_cronjob``, ``manage_pulse``, ``send_message``, ``/jobs``,
``/pulse``, ``POST /api/pulse/run``, the pulse line in the system prompt, the
``/api/status`` section), starts the timers, and stops them on the way out.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aiohttp import web

from agent.app.application import App, Feature, Scheduling
from agent.context import RunContext
from agent.owner import OwnerPrefs, OwnerSettings
from agent.runs.runner import Runner, RunnerConfig
from agent.tools.cron import MANAGE_CRONJOB
from agent.tools.pulse import MANAGE_PULSE
from agent.tools.send import SEND_MESSAGE, any_sender_running
from channels.types import InboundMessage, Reply
from scheduler.cron.job import JobLimits
from scheduler.cron.service import CronService
from scheduler.engine import Engine, EngineConfig
from scheduler.fires.claims import LeaseStore
from scheduler.fires.recorder import RunRecorder
from scheduler.fires.records import LeaseTerms, RunLeases, RunStore
from scheduler.pulse.store import PulseStore
from scheduler.views import (
    job_line,
    job_view,
    pulse_status_text,
    pulse_view,
    run_line,
    run_view,
)

log = logging.getLogger(__name__)
Doc = dict[str, Any]
SHOWN_JOBS = 30
"""Jobs shown by ``/jobs`` and ``/api/status`` (a Telegram message holds 4,096 chars)."""
JOBS_HINT = "No cron jobs yet. Try: “every weekday at 9 remind me to check the backups”."


@dataclass(frozen=True)
class SchedulingOptions:
    timer: bool = True
    """Arm real timers; tests turn them off and drive time with ``engine.run_due``."""
    cron_timeout: float | None = None
    """Seconds; None takes ``CRON_TIMEOUT_SECONDS`` from the settings (default 120)."""
    pulse_timeout: float | None = None
    """Seconds; None takes ``PULSE_TIMEOUT_SECONDS`` from the settings (default 180)."""
    grace: timedelta = timedelta(minutes=10)
    resync_seconds: float = 60.0
    lease: LeaseTerms = field(default_factory=LeaseTerms)
    """How long a run's lease lasts unrenewed (``scheduler.fires.records``)."""


def build_parts(app: App, options: SchedulingOptions) -> Scheduling:
    deps = app.deps
    settings = deps.settings
    limits = JobLimits(
        max_jobs=settings.max_cron_jobs,
        min_interval=timedelta(minutes=settings.min_cron_interval_minutes),
    )
    owner = deps.owner or OwnerSettings(deps.db, app.clock, settings.timezone)
    deps.owner = owner
    jobs = CronService(deps.db, app.clock, owner.current.timezone, limits)
    pulse = PulseStore(deps.db, app.clock, owner)

    async def timezone_changed(old: OwnerPrefs, new: OwnerPrefs) -> None:
        """Jobs that ran on the owner's old clock follow the owner to the new one."""
        if old.timezone != new.timezone:
            moved = await jobs.move_timezone(old.timezone, new.timezone)
            log.info(
                "timezone %s -> %s: %d cron job(s) moved", old.timezone, new.timezone, len(moved)
            )

    owner.listeners.append(timezone_changed)
    runs = RunStore(deps.db)
    runner = Runner(
        deps=deps,
        agent=app.agent,
        jobs=jobs,
        pulse=pulse,
        runs=runs,
        config=RunnerConfig(
            cron_timeout=options.cron_timeout or settings.cron_timeout_seconds,
            pulse_timeout=options.pulse_timeout or settings.pulse_timeout_seconds,
        ),
    )
    # This start of this process, as the holder of its runs and fires.
    holder = RunLeases(runs, app.clock, terms=options.lease)
    recorder = RunRecorder(
        runs,
        app.clock,
        cron=runner.run_cron,
        pulse=runner.plan_pulse,
        on_failures=runner.warn_failures,
        leases=holder,
    )
    engine = Engine(
        jobs=jobs,
        pulse=pulse,
        runs=runs,
        leases=LeaseStore(deps.db, owner=holder.owner),
        clock=app.clock,
        recorder=recorder,
        config=EngineConfig(
            grace=options.grace,
            resync_seconds=options.resync_seconds,
            sole_owner=app.database.owns_server,
        ),
        timer=options.timer,
    )
    return Scheduling(jobs, pulse, runs, engine, runner)


def _register(app: App, parts: Scheduling) -> None:
    """Tools, commands, route, prompt and status contributions."""
    app.deps.cron, app.deps.pulse, app.deps.scheduler = parts.jobs, parts.pulse, parts.engine
    app.scheduling = parts
    app.catalog.add(MANAGE_CRONJOB)
    app.catalog.add(MANAGE_PULSE)
    if "send_message" not in app.catalog:
        app.catalog.add(SEND_MESSAGE, any_sender_running)

    async def pulse_command(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        words = message.text.split()
        if len(words) > 1 and words[1].lower() == "run":
            run = await parts.engine.run_pulse_now("command")
            return [Reply(run_line(run, parts.pulse.tz))]
        state = await parts.pulse.get()
        text = pulse_status_text(state, parts.pulse.tz, app.clock(), notes=False)
        return [Reply(text + "\n/pulse run — run one now")]

    async def jobs_command(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        jobs = await parts.jobs.list_jobs(limit=SHOWN_JOBS)
        if not jobs:
            return [Reply(JOBS_HINT)]
        now = app.clock()
        lines = [job_line(job, now) for job in jobs]
        total = await parts.jobs.count()
        if total > len(jobs):
            lines.append(f"… and {total - len(jobs)} more (ask me to list them)")
        return [Reply("Cron jobs:\n" + "\n".join(lines))]

    async def run_pulse_route(request: web.Request) -> web.Response:
        run = await parts.engine.run_pulse_now("api")
        return web.json_response(run_view(run))

    async def prompt_section(ctx: RunContext) -> str | None:
        if ctx.tier != "owner":
            return None
        state = await parts.pulse.cached()
        return "## Pulse\n" + pulse_status_text(state, ctx.tz, ctx.now, notes=ctx.kind != "pulse")

    async def status_section() -> dict[str, Any]:
        now = app.clock()
        return {
            "pulse": pulse_view(await parts.pulse.get(), parts.pulse.tz, now),
            "cron_jobs": [job_view(j, now) for j in await parts.jobs.list_jobs(SHOWN_JOBS)],
            "cron_job_count": await parts.jobs.count(),
            "scheduler": {"armed": len(parts.engine.armed), "timer": parts.engine.timer_on},
        }

    app.dispatcher.commands["/pulse"] = pulse_command
    app.dispatcher.commands["/jobs"] = jobs_command
    app.routes.append(("POST", "/api/pulse/run", run_pulse_route))
    app.agent.sections.append(prompt_section)
    app.status_sections.append(status_section)


def scheduling(options: SchedulingOptions | None = None) -> Feature:
    """The feature with chosen options (tests: no timers, tiny timeouts)."""
    chosen = options or SchedulingOptions()

    async def feature(app: App, stack: contextlib.AsyncExitStack) -> None:
        parts = build_parts(app, chosen)
        _register(app, parts)
        # Runs a dead process left "running" are reclaimed as the engine loads.
        armed = await parts.engine.start()
        stack.push_async_callback(parts.engine.stop)
        log.info("scheduler: %d timer(s) armed%s", armed, "" if chosen.timer else " (manual)")

    return feature


async def scheduling_feature(app: App, stack: contextlib.AsyncExitStack) -> None:
    """The default scheduling feature, as listed in ``agent.app.features.FEATURES``."""
    await scheduling()(app, stack)
