"""The scheduling feature: cron jobs and the pulse, wired into the app.

Builds the stores and the engine once, returns as its parts what the owner and the
model see (``manage_cronjob``, ``manage_pulse``, ``send_message``, ``/jobs``,
``/pulse``, ``POST /api/pulse/run``, the pulse line in the system prompt, the
``/api/status`` section) and the services runs use; once the agent exists it makes
the runner and starts the timers, and it stops them on the way out.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aiohttp import web
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.application import App, Core, Feature, FeatureContext, Parts, Scheduling, Services
from agent.config import Settings
from agent.context import RunContext
from agent.conversation.prompt import changing
from agent.owner import Listener as OwnerListener
from agent.owner import OwnerPrefs, OwnerSettings
from agent.reach import Reach
from agent.runs.runner import Runner, RunnerConfig
from agent.runs.zone_change import ZoneMove, ZoneNotice
from agent.tools.catalog import always
from agent.tools.cron import MANAGE_CRONJOB, owner_zone
from agent.tools.pulse import MANAGE_PULSE
from agent.tools.send import SEND_MESSAGE, any_sender_running
from channels.delivery.outbox import Outbox
from channels.types import Channel, InboundMessage, Reply
from runtime.clock import Clock
from scheduler.cron.job import JobLimits, JobReader
from scheduler.cron.service import CronService
from scheduler.engine import AlreadyRunning, Engine, EngineConfig
from scheduler.fires.leases import LeaseTerms, RunLeases
from scheduler.fires.recorder import RunRecorder
from scheduler.pulse.store import PulseState, PulseStore
from scheduler.views import (
    job_line,
    job_view,
    pulse_status_text,
    pulse_view,
    run_line,
    zone_note,
)
from storage.repos.cron_jobs import CronJobStore
from storage.repos.leases import LeaseStore
from storage.repos.pulse import PulseRepo
from storage.repos.runs.store import RunStore

log = logging.getLogger(__name__)
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
    """How long a run's lease lasts unrenewed (``scheduler.fires.leases``)."""


def build_scheduling(
    db: AsyncDatabase[Any],
    clock: Clock,
    owner: OwnerSettings,
    settings: Settings,
    options: SchedulingOptions,
    reached: tuple[Outbox, Mapping[str, Channel], Reach],
    *,
    sole_owner: bool,
) -> Scheduling:
    """The stores and the engine; the engine's runs are done by the runner handed to
    ``Engine.start`` (made once the agent exists, as the feature starts)."""
    limits = JobLimits(
        max_jobs=settings.max_cron_jobs,
        min_interval=timedelta(minutes=settings.min_cron_interval_minutes),
    )
    jobs = CronService(CronJobStore(db, JobReader()), clock, lambda: owner.current.timezone, limits)
    pulse = PulseStore(PulseRepo(db), clock, owner)
    runs = RunStore(db)
    outbox, channels, reach = reached
    tell = ZoneNotice(outbox, channels, reach, owner)
    # This start of this process, as the holder of its runs and fires.
    holder = RunLeases(runs, clock, terms=options.lease)
    recorder = RunRecorder(runs, clock, leases=holder)  # its work comes with the engine's start
    engine = Engine(
        jobs=jobs,
        pulse=pulse,
        runs=runs,
        leases=LeaseStore(db, owner=holder.owner),
        clock=clock,
        recorder=recorder,
        config=EngineConfig(
            grace=options.grace,
            resync_seconds=options.resync_seconds,
            sole_owner=sole_owner,
        ),
        timer=options.timer,
        timed=(ZoneMove(owner, jobs, tell),),  # the owner's timezone change set for later
    )
    return Scheduling(jobs, pulse, runs, engine)


def following_timezone(jobs: CronService) -> OwnerListener:
    """The owner's listener that moves the jobs that ran on the owner's old clock to
    the new one."""

    async def timezone_changed(old: OwnerPrefs, new: OwnerPrefs) -> None:
        if old.timezone != new.timezone:
            moved = await jobs.move_timezone(old.timezone, new.timezone)
            log.info(
                "timezone %s -> %s: %d cron job(s) moved", old.timezone, new.timezone, len(moved)
            )

    return timezone_changed


def pending_zone_timer(engine: Engine) -> OwnerListener:
    """The owner's listener that re-arms the timer when a timezone change is set for
    later, replaced or dropped."""

    async def pending_changed(old: OwnerPrefs, new: OwnerPrefs) -> None:
        if old.pending_zone != new.pending_zone:
            await engine.timed_changed()

    return pending_changed


def make_runner(core: Core, parts: Scheduling, options: SchedulingOptions) -> Runner:
    settings = core.deps.settings
    return Runner(
        deps=core.deps,
        agent=core.agent,
        jobs=parts.jobs,
        pulse=parts.pulse,
        runs=parts.runs,
        config=RunnerConfig(
            cron_timeout=options.cron_timeout or settings.cron_timeout_seconds,
            pulse_timeout=options.pulse_timeout or settings.pulse_timeout_seconds,
        ),
    )


def build_parts(app: App, options: SchedulingOptions) -> tuple[Scheduling, Runner]:
    """A second scheduler on a running app and the runner to start its engine with
    (tests: another process, with the owner's settings of its own, read as its engine
    starts)."""
    deps = app.deps
    owner = OwnerSettings(deps.db, app.clock, deps.settings.timezone)
    reached = (deps.outbox, deps.channels, deps.reach)
    parts = build_scheduling(
        deps.db, app.clock, owner, deps.settings, options, reached,
        sole_owner=app.database.owns_server,
    )  # fmt: skip
    owner.listen(following_timezone(parts.jobs))  # as ``scheduling`` has the app do
    owner.listen(pending_zone_timer(parts.engine))
    return parts, make_runner(Core(deps, app.agent), parts, options)


def _parts(parts: Scheduling, clock: Clock) -> Parts:
    """Tools, commands, route, prompt and status contributions."""

    async def pulse_command(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        words = message.text.split()
        if len(words) > 1 and words[1].lower() == "run":
            run = await parts.engine.run_pulse_now("command")
            return [Reply(run_line(run, parts.pulse.tz))]
        state = await parts.pulse.get()
        text = pulse_status_text(state, parts.pulse.tz, clock(), notes=False)
        return [Reply(text + "\n/pulse run — run one now")]

    async def jobs_command(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        jobs = await parts.jobs.list_jobs(limit=SHOWN_JOBS)
        if not jobs:
            return [Reply(JOBS_HINT)]
        now = clock()
        lines = [job_line(job, now, ctx.tz) for job in jobs]
        total = await parts.jobs.count()
        if total > len(jobs):
            lines.append(f"… and {total - len(jobs)} more (ask me to list them)")
        if (note := zone_note(jobs, owner_zone(ctx), now)) is not None:
            lines.append(note)
        return [Reply(f"Cron jobs (times in {ctx.tz.key}):\n" + "\n".join(lines))]

    async def run_pulse_route(request: web.Request) -> web.Response:
        try:
            run = await parts.engine.run_pulse_alone("api")
        except AlreadyRunning as busy:
            since = busy.since.isoformat() if busy.since is not None else None
            error = {"error": "a pulse is already running; not started again", "since": since}
            return web.json_response(error, status=409)
        return web.json_response(run.to_json())

    def pulse_text(state: PulseState, ctx: RunContext) -> str:
        return "## Pulse\n" + pulse_status_text(state, ctx.tz, ctx.now, notes=ctx.kind != "pulse")

    async def read_pulse_section(ctx: RunContext) -> str:
        return pulse_text(await parts.pulse.cached(), ctx)

    def prompt_section(ctx: RunContext) -> Awaitable[str] | str | None:
        """The pulse line: from memory while the state read last is recent
        (``PulseStore.known``), else read."""
        if ctx.tier != "owner":
            return None
        state = parts.pulse.known()
        return pulse_text(state, ctx) if state is not None else read_pulse_section(ctx)

    async def status_section() -> dict[str, Any]:
        now = clock()
        return {
            "pulse": pulse_view(await parts.pulse.get(), parts.pulse.tz, now),
            "cron_jobs": [job_view(j, now) for j in await parts.jobs.list_jobs(SHOWN_JOBS)],
            "cron_job_count": await parts.jobs.count(),
            "scheduler": {"armed": len(parts.engine.armed), "timer": parts.engine.timer_on},
        }

    return Parts(
        tools=(
            (MANAGE_CRONJOB, always),
            (MANAGE_PULSE, always),
            (SEND_MESSAGE, any_sender_running),
        ),
        commands={"/pulse": pulse_command, "/jobs": jobs_command},
        routes=(("POST", "/api/pulse/run", run_pulse_route),),
        prompt_sections=(changing(prompt_section),),
        status=(status_section,),
        services=Services(scheduling=parts),
    )


def scheduling(options: SchedulingOptions | None = None) -> Feature:
    """The feature with chosen options (tests: no timers, tiny timeouts)."""
    chosen = options or SchedulingOptions()

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        parts = build_scheduling(
            ctx.database.db,
            ctx.clock,
            ctx.owner,
            ctx.settings,
            chosen,
            (ctx.outbox, ctx.channels, ctx.reach),
            sole_owner=ctx.database.owns_server,
        )
        armed = False

        async def start(core: Core) -> None:
            """Once the agent exists: runs that a dead process left "running" are
            reclaimed as the engine loads, then its timers arm."""
            nonlocal armed
            count = await parts.engine.start(make_runner(core, parts, chosen))
            armed = True
            log.info("scheduler: %d timer(s) armed%s", count, "" if chosen.timer else " (manual)")

        yield dataclasses.replace(
            _parts(parts, ctx.clock),
            start=start,
            owner_listeners=(following_timezone(parts.jobs), pending_zone_timer(parts.engine)),
        )
        if armed:
            await parts.engine.stop()

    return feature


scheduling_feature: Feature = scheduling()
"""The default scheduling feature, as listed in ``agent.app.features.FEATURES``."""
