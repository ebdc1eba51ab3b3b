"""The app's health in one place, read by ``GET /healthz`` and by the dead man's switch.

``collect`` reads each component's state: the database, the scheduler (its engine, its
next wake, any fire overdue past its grace window), each running channel, the model
(its last success and last failure, as the run records tell), the outbox's backlog and
the MCP servers. What it returns holds no secrets: no URL, token, phone number, chat,
job name or exception text, only states, counts, ids and times, since ``/healthz``
needs no token.

Three components are vital: the database, the scheduler and the channels. The others
degrade the answer without failing it. ``/healthz`` answers 503 only when the database
does not answer (unreachable, or connected but silent: ``busy``), otherwise 200 with
what is degraded listed.

The dead man's switch (``HEALTHCHECK_URL``, Healthchecks.io style) pings the URL every
``HEALTHCHECK_INTERVAL_SECONDS`` while every vital component is well, and otherwise
posts a one-line reason to ``<url>/fail`` (from the second check in a row that finds
the problem; the first only holds its ping back). So a host that dies or wedges (its event loop
stuck, the process gone) stops pinging and the service outside alerts on the absence.
A ping that cannot be delivered is logged once per outage, with the URL's host only
(the path usually holds the check's secret UUID), and never stops anything. The
receiver's answer is read up to ``ANSWER_LIMIT`` bytes, within the ping's timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from agent.app.application import App, Feature, FeatureContext, Parts, Scheduling
from channels.http_fetch import read_at_most
from runtime.tasks import stop_task
from storage.repos.runs.store import RunStore

if TYPE_CHECKING:
    from agent.context import McpManager
    from channels.delivery.outbox import Outbox
    from channels.types import Channel
    from runtime.clock import Clock
    from storage.db import Database

log = logging.getLogger(__name__)
State = Literal["ok", "degraded", "down", "unknown", "off"]
QUERY_SECONDS = 2.0
"""Each read a check makes gets this long; a slower one leaves its component ``unknown``."""
RECENT_RUNS = 20
"""Run records read for the model's last success and last failure."""
OUTBOX_LATE_SECONDS = 600.0
"""A message waiting this long to be sent makes the outbox ``degraded``."""
REASON_LIMIT = 300
PING_TIMEOUT = 10.0
"""Seconds a ping may take (at most the interval)."""
ANSWER_LIMIT = 64 * 1024
"""Bytes of the receiver's answer read (nothing in it is needed): a receiver that
answers a gigabyte costs no more than this."""
FAIL_AFTER = 2
"""Checks in a row that must find a problem before ``/fail`` is sent (the first one
only holds the ping back): a channel reconnecting for a second pages nobody."""
CHANNEL_FIELDS = ("connected", "state", "mode")
"""What ``/healthz`` shows of a channel's status: never its account or chats."""


@dataclass(frozen=True)
class Component:
    """One part's state; ``problem``, when set, is a line naming what is wrong."""

    state: State
    detail: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None

    def view(self) -> dict[str, Any]:
        return {"state": self.state, **self.detail}


@dataclass(frozen=True)
class Health:
    """Every component's state at one moment."""

    db: str
    """``ok``, ``busy`` or ``unreachable`` (``storage.db.Database.health``)."""
    scheduler: Component
    channels: Mapping[str, Component]
    others: Mapping[str, Component]
    """Not vital: the model, the outbox, the MCP servers."""
    engine: str = "not configured"

    @property
    def database_ok(self) -> bool:
        return self.db == "ok"

    def _named(self) -> list[tuple[str, Component]]:
        named = [("scheduler", self.scheduler)]
        named += [(f"channel:{name}", comp) for name, comp in sorted(self.channels.items())]
        return named + list(self.others.items())

    @property
    def degraded(self) -> list[str]:
        """What is not well: ``database``, ``scheduler``, ``channel:<name>``, ``model``,
        ``outbox``, ``mcp``."""
        names = [] if self.database_ok else ["database"]
        return names + [name for name, comp in self._named() if comp.state in ("degraded", "down")]

    @property
    def reason(self) -> str | None:
        """None while every vital component is well; else one line saying what is not."""
        lines = [] if self.database_ok else [f"database {self.db}"]
        vital = [self.scheduler, *(self.channels[name] for name in sorted(self.channels))]
        lines += [comp.problem for comp in vital if comp.problem]
        if not lines:
            return None
        text = "; ".join(lines)
        return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"

    def view(self) -> dict[str, Any]:
        """``/healthz``'s JSON: ``status``, ``db``, ``channels`` (name: up) and
        ``scheduler`` (the engine's state) as before, with ``degraded`` and each
        component's state."""
        degraded = self.degraded
        return {
            "status": "down" if not self.database_ok else "degraded" if degraded else "ok",
            "db": self.db,
            "channels": {name: comp.state == "ok" for name, comp in self.channels.items()},
            "scheduler": self.engine,
            "degraded": degraded,
            "reason": self.reason,
            "components": {
                "database": {"state": "ok" if self.database_ok else "down", "health": self.db},
                "scheduler": self.scheduler.view(),
                "channels": {name: comp.view() for name, comp in self.channels.items()},
                **{name: comp.view() for name, comp in self.others.items()},
            },
        }


@dataclass(frozen=True, eq=False)
class HealthSources:
    """What the health is read from: the ``App``'s parts, or a feature's."""

    database: Database
    channels: Mapping[str, Channel]
    outbox: Outbox
    clock: Clock
    scheduling: Scheduling | None = None
    mcp: McpManager | None = None

    @classmethod
    def of_app(cls, app: App) -> HealthSources:
        return cls(app.database, app.channels, app.outbox, app.clock, app.scheduling, app.deps.mcp)


async def collect(sources: HealthSources) -> Health:
    """Every component's state now. With the database silent, what is read from it is
    ``unknown`` (and not asked: each read would wait out its timeout)."""
    db = await sources.database.health()
    channels = {name: channel_health(name, ch.status()) for name, ch in sources.channels.items()}
    engine = sources.scheduling.engine.state if sources.scheduling is not None else "not configured"
    unknown = Component("unknown")
    if db != "ok":
        scheduler = unknown if sources.scheduling is not None else Component("off")
        others = {"model": unknown, "outbox": unknown, "mcp": mcp_health(sources.mcp)}
        return Health(db, scheduler, channels, others, engine)
    scheduler, model, outbox = await asyncio.gather(
        _bounded(lambda: scheduler_health(sources.scheduling, sources.clock())),
        _bounded(lambda: model_health(sources.database)),
        _bounded(lambda: outbox_health(sources.outbox, sources.clock())),
    )
    others = {"model": model, "outbox": outbox, "mcp": mcp_health(sources.mcp)}
    return Health(db, scheduler, channels, others, engine)


async def _bounded(check: Callable[[], Awaitable[Component]]) -> Component:
    """``check()`` within ``QUERY_SECONDS``. Made here, not by the caller: a gather
    cancelled before this task first runs would leave a made coroutine never awaited."""
    try:
        async with asyncio.timeout(QUERY_SECONDS):
            return await check()
    except Exception as exc:  # a read that failed says nothing about the component
        return Component("unknown", {"error": type(exc).__name__})


def channel_health(name: str, status: Mapping[str, Any]) -> Component:
    """Up while its status says ``connected`` (a channel that does not say is up)."""
    detail = {key: status[key] for key in CHANNEL_FIELDS if key in status}
    if status.get("connected", True):
        return Component("ok", detail)
    return Component("down", detail, f"channel {name} down")


async def scheduler_health(scheduling: Scheduling | None, now: datetime) -> Component:
    """The engine's state, its next wake, and the fires overdue past their grace window:
    an enabled job (or the pulse) whose stored next fire is older than that was never
    handled, whatever the engine believes."""
    if scheduling is None:
        return Component("off")
    engine = scheduling.engine
    grace = engine.config.grace
    wake = engine.next_wake
    detail: dict[str, Any] = {
        "engine": engine.state,
        "next_fire_at": wake.isoformat() if wake is not None else None,
        "grace_seconds": grace.total_seconds(),
    }
    overdue: list[dict[str, Any]] = []
    for job in await scheduling.jobs.store.enabled(due_by=now - grace):
        if job.next_fire_at is not None:
            overdue.append({"kind": "cron", "job_id": job.id, "due_at": job.next_fire_at})
    pulse = await scheduling.pulse.get()
    if pulse.enabled and pulse.next_pulse_at is not None and pulse.next_pulse_at < now - grace:
        overdue.append({"kind": "pulse", "job_id": None, "due_at": pulse.next_pulse_at})
    overdue.sort(key=lambda item: item["due_at"])
    detail["overdue"] = [{**item, "due_at": item["due_at"].isoformat()} for item in overdue]
    if engine.state != "running":
        return Component("down", detail, f"scheduler {engine.state}")
    if overdue:
        first = overdue[0]
        late = (now - first["due_at"]).total_seconds() / 60
        what = f"cron job {first['job_id']}" if first["kind"] == "cron" else "the pulse"
        more = f" (and {len(overdue) - 1} more)" if len(overdue) > 1 else ""
        grace_min = grace.total_seconds() / 60
        problem = f"scheduler: {what} overdue by {late:.0f} min (grace {grace_min:.0f} min){more}"
        return Component("down", detail, problem)
    return Component("ok", detail)


async def model_health(database: Database) -> Component:
    """The model's last success and last failure, as the latest run records tell (a chat
    leaves no record: ``unknown`` until a cron job or a pulse has run)."""
    success: datetime | None = None
    failure: datetime | None = None
    for run in await RunStore(database.db).latest_finished(RECENT_RUNS):
        at = run.ended_at or run.started_at
        if run.status == "success" and success is None:
            success = at
        elif run.reason == "model_unavailable" and failure is None:
            failure = at
    detail = {
        "last_success_at": success.isoformat() if success else None,
        "last_error_at": failure.isoformat() if failure else None,
    }
    if success is None and failure is None:
        return Component("unknown", detail)
    if failure is not None and (success is None or failure > success):
        return Component("degraded", detail)
    return Component("ok", detail)


async def outbox_health(outbox: Outbox, now: datetime) -> Component:
    """Messages waiting to be sent and given up on; ``degraded`` when one has waited
    longer than ``OUTBOX_LATE_SECONDS``."""
    backlog = await outbox.backlog()
    oldest = backlog.oldest_pending_at
    detail = {
        "pending": backlog.pending,
        "failed": backlog.failed,
        "oldest_pending_at": oldest.isoformat() if oldest else None,
    }
    if oldest is not None and (now - oldest).total_seconds() > OUTBOX_LATE_SECONDS:
        return Component("degraded", detail)
    return Component("ok", detail)


def mcp_health(mcp: McpManager | None) -> Component:
    """Each configured server's state (no error text: it may name a URL or a path)."""
    if mcp is None:
        return Component("off")
    from agent.tools.mcp.client import McpServers  # loaded already: a server is configured

    if not isinstance(mcp, McpServers):
        return Component("off")
    servers = {server.name: server.state for server in mcp.status()}
    down = any(state != "connected" for state in servers.values())
    return Component("degraded" if down else "ok", {"servers": servers})


class HealthBoard:
    """``collect`` for many callers: callers who ask while a collection is under way
    share it, so a burst of ``/healthz`` requests reads the database once."""

    def __init__(self, sources: Callable[[], HealthSources]) -> None:
        self._sources = sources
        self._current: asyncio.Future[Health] | None = None

    async def read(self) -> Health:
        if self._current is None or self._current.done():
            self._current = asyncio.ensure_future(collect(self._sources()))
        return await asyncio.shield(self._current)


# --- the dead man's switch -------------------------------------------------------------


def fail_url(url: str) -> str:
    """``url`` with ``/fail`` added to its path (its query kept), as Healthchecks.io takes."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/fail"))


class DeadMansSwitch:
    """Pings ``url`` every ``interval`` seconds while ``check`` finds every vital
    component well; otherwise posts the reason to ``<url>/fail``."""

    def __init__(
        self,
        url: str,
        *,
        interval: float,
        check: Callable[[], Awaitable[Health]],
        http: aiohttp.ClientSession,
        timeout: float = PING_TIMEOUT,
        fail_after: int = FAIL_AFTER,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the healthcheck interval must be positive, not {interval!r}")
        if fail_after < 1:
            raise ValueError(f"fail_after must be at least 1, not {fail_after!r}")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("HEALTHCHECK_URL must be an http(s) URL with a host")
        self._url = url
        self._fail = fail_url(url)
        self.host = parts.hostname
        """All that is logged of the URL: its path usually holds the check's secret."""
        self.interval = interval
        self._check = check
        self._http = http
        self._timeout = aiohttp.ClientTimeout(total=min(timeout, interval))
        self._task: asyncio.Task[None] | None = None
        self._delivering = True
        """The last ping reached the receiver (an outage is logged once, at its start)."""
        self._failing: str | None = None
        """The reason last reported to ``/fail`` (logged when it changes)."""
        self._fail_after = fail_after
        self._bad = 0
        """Checks in a row that found a vital component unwell."""
        self.pings = 0
        self.fails = 0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="healthcheck")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await self.beat()
            await asyncio.sleep(max(0.0, began + self.interval - loop.time()))

    async def beat(self) -> bool:
        """One check and one ping (or ``/fail``); whether the receiver took it (False
        too for a check held back: a problem not yet seen ``fail_after`` times in a
        row gets neither). Never raises, whatever goes wrong."""
        try:
            health = await self._check()
            reason = health.reason
        except Exception as exc:
            log.exception("healthcheck: the health check raised")
            reason = f"health check failed: {type(exc).__name__}"
        self._bad = 0 if reason is None else self._bad + 1
        if 0 < self._bad < self._fail_after:
            log.info("healthcheck: %s; no ping, /fail if it lasts", reason)
            return False
        if reason != self._failing:
            if reason is None:
                log.info("healthcheck: healthy again; pinging %s", self.host)
            else:
                log.warning("healthcheck: reporting a failure to %s: %s", self.host, reason)
            self._failing = reason
        try:
            if reason is None:
                request = self._http.get(self._url, timeout=self._timeout)
            else:
                body = reason.encode()
                request = self._http.post(self._fail, data=body, timeout=self._timeout)
            async with request as response:
                await read_at_most(response, ANSWER_LIMIT)
                problem = None if response.status < 400 else f"HTTP {response.status}"
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            problem = type(exc).__name__
        if problem is not None:
            if self._delivering:
                log.warning(
                    "healthcheck: ping to %s failed (%s); not logged again until one succeeds",
                    self.host,
                    problem,
                )
            self._delivering = False
            return False
        if not self._delivering:
            log.info("healthcheck: pings reach %s again", self.host)
        self._delivering = True
        if reason is None:
            self.pings += 1
        else:
            self.fails += 1
        return True


def healthcheck(interval: float | None = None) -> Feature:
    """The dead man's switch as a feature (``interval``: seconds, tests make it short;
    None takes ``HEALTHCHECK_INTERVAL_SECONDS``). Listed last: it reads the services of
    every feature before it, starts once they have, and stops before them. Only the
    process that owns the transports (``watchkeeper run``) pings."""

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        url = ctx.settings.healthcheck_url
        if url is None or not ctx.exclusive_transports:
            yield Parts()
            return
        sources = HealthSources(
            ctx.database,
            ctx.channels,
            ctx.outbox,
            ctx.clock,
            ctx.services.scheduling,
            ctx.services.mcp,
        )
        switch = DeadMansSwitch(
            url,
            interval=interval or ctx.settings.healthcheck_interval_seconds,
            check=lambda: collect(sources),
            http=ctx.http,
        )

        async def start(_core: object) -> None:
            await switch.start()
            log.info("healthcheck: pinging %s every %g s", switch.host, switch.interval)

        yield Parts(start=start)
        await switch.stop()

    return feature


healthcheck_feature: Feature = healthcheck()
"""The default dead man's switch, as listed in ``agent.app.features.FEATURES``."""
