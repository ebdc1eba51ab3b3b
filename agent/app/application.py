"""The running application (``App``) as the composition root assembles it, and the
shapes of what plugs into it: features, HTTP routes, status sections.

Features (alerts, scheduling, WhatsApp) receive the ``App`` and register their
tools, commands, routes and status sections on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.app.shutdown import Shutdown

if TYPE_CHECKING:  # the agent's modules load after the first long poll (``agent.app.core``)
    from aiohttp import web

    from agent.config import Settings
    from agent.context import AgentDeps, Clock
    from agent.conversation.agent import Agent
    from agent.conversation.dispatch import Dispatcher
    from agent.runs.runner import Runner
    from agent.tools.catalog import ToolCatalog
    from channels.delivery.outbox import Outbox
    from channels.delivery.pipeline import Pipeline
    from channels.types import Channel
    from scheduler.cron.service import CronService
    from scheduler.engine import Engine
    from scheduler.fires.records import RunStore
    from scheduler.pulse.store import PulseStore
    from storage.db import Database

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]
Route = tuple[str, str, Handler]
"""(method, path, handler) of an HTTP route a part mounts on the server."""
TELEGRAM_WEBHOOK = "/webhooks/telegram"
StatusSection = Callable[[], Awaitable[dict[str, Any]]]
Feature = Callable[["App", contextlib.AsyncExitStack], Awaitable[None]]
"""A part started after the core (scheduler, alerts, SMS...): it registers tools,
commands, routes and status sections on the app and pushes its own teardown."""


@dataclass
class Scheduling:
    """The running parts, kept on ``App.scheduling`` for tests and benchmarks."""

    jobs: CronService
    pulse: PulseStore
    runs: RunStore
    engine: Engine
    runner: Runner


@dataclass
class App:
    settings: Settings
    database: Database
    deps: AgentDeps
    agent: Agent
    dispatcher: Dispatcher
    outbox: Outbox
    pipeline: Pipeline
    catalog: ToolCatalog
    channels: dict[str, Channel] = field(default_factory=dict)
    clock: Clock = field(default_factory=lambda: _system_clock())  # defined below
    routes: list[Route] = field(default_factory=list)
    """Extra HTTP routes (method, path, handler) that features mount on the server."""
    status_sections: list[StatusSection] = field(default_factory=list)
    """Contributions to ``GET /api/status``, each returning a dict merged into the answer."""
    scheduling: Scheduling | None = None
    """The scheduler's parts, once the scheduling feature has started."""
    exclusive_transports: bool = True
    """Start transports one account allows only one client of (the WhatsApp session).
    False for ``watchkeeper chat``, which may run beside ``watchkeeper run``."""
    shutdown: Shutdown = field(default_factory=Shutdown)
    """The stop's deadline, shared by every part's stop (``agent.app.shutdown``)."""

    def status(self) -> dict[str, Any]:
        return {name: ch.status() for name, ch in self.channels.items()}

    async def add_channel(self, channel: Channel, stack: contextlib.AsyncExitStack) -> None:
        """Start ``channel`` on the pipeline; it stops with the app, in reverse order."""
        await channel.start(self.pipeline.submit)
        stack.push_async_callback(channel.stop)
        self.channels[channel.name] = channel


def _system_clock() -> Clock:
    from agent.context import system_clock

    return system_clock
