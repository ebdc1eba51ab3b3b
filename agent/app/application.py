"""The running application (``App``) as the composition root assembles it, and the
shapes of what plugs into it: features, their parts, HTTP routes, status sections, and
the channels the registry's entries build (``Built``, ``ChannelSetup``).

A feature is a setup/teardown generator, as aiohttp's ``cleanup_ctx``: the code before
its one ``yield`` starts what it owns, it yields its ``Parts`` (tools, commands,
interceptors, routes, prompt and status sections, burst rules, listeners of the
owner's settings, the services it provides), and the code after the ``yield`` stops
what it started. The root runs the features in order, then builds the services, the
tool catalogue, the agent, the dispatcher and the pipeline once from their parts and
freezes the listeners; nothing is added to any of them afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from agent.app.shutdown import Shutdown

if TYPE_CHECKING:  # the agent's modules load after the first long poll (``agent.app.core``)
    import aiohttp
    from aiohttp import web

    from agent.alerts.router import AlertRouter
    from agent.config import Settings
    from agent.context import AgentDeps, McpManager
    from agent.conversation.agent import Agent
    from agent.conversation.dispatch import Command, Dispatcher, Interceptor, TierResolver
    from agent.conversation.pairing import Pairing
    from agent.conversation.prompt import PromptSection
    from agent.owner import Listener as OwnerListener
    from agent.owner import OwnerSettings
    from agent.reach import Reach
    from agent.runs.runner import Runner
    from agent.tools.catalog import Offer, ToolCatalog
    from channels.delivery.intake import Intake
    from channels.delivery.outbox import Outbox
    from channels.delivery.pipeline import BurstRule, Pipeline
    from channels.types import Channel
    from runtime.clock import Clock
    from scheduler.cron.service import CronService
    from scheduler.engine import Engine
    from scheduler.monitors.service import Monitors
    from scheduler.pulse.store import PulseStore
    from storage.db import Database
    from storage.repos.runs.store import RunStore

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]
Route = tuple[str, str, Handler]
"""(method, path, handler) of an HTTP route a part mounts on the server."""
TELEGRAM_WEBHOOK = "/webhooks/telegram"
StatusSection = Callable[[], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Scheduling:
    """The scheduler's running parts, kept on ``App.scheduling`` for tests and benchmarks.

    The engine is built first; its runs go through the agent, whose tools start pulse
    runs through the engine, so the runner (made once the agent exists) is handed to
    ``Engine.start``, as a channel gets its sink: the engine fires nothing before."""

    jobs: CronService
    pulse: PulseStore
    runs: RunStore
    engine: Engine

    @property
    def runner(self) -> Runner:
        """The runner the engine was started with."""
        return cast("Runner", self.engine.recorder.work)


@dataclass(frozen=True)
class Services:
    """The long-lived services features provide to every run (``AgentDeps``); each
    stays None when the feature that provides it is off."""

    alerts: AlertRouter | None = None
    scheduling: Scheduling | None = None
    mcp: McpManager | None = None
    monitors: Monitors | None = None
    """The running monitors (the dashboard's Monitors page acts through them)."""

    def merged(self, other: Services) -> Services:
        """Both features' services; two features providing the same one is a bug."""
        given = {}
        for item in dataclasses.fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if mine is not None and theirs is not None:
                raise ValueError(f"two features provide the {item.name} service")
            given[item.name] = theirs if mine is None else mine
        return Services(**given)


@dataclass(frozen=True, eq=False)
class Core:
    """What the root builds from every feature's parts, for the parts that need it."""

    deps: AgentDeps
    agent: Agent


@dataclass(frozen=True)
class Parts:
    """What one feature contributes; the root builds the catalogue, the agent and the
    dispatcher once from the parts of every feature."""

    tools: tuple[Offer, ...] = ()
    """Tools with the predicate that says when each is offered."""
    commands: Mapping[str, Command] = field(default_factory=dict)
    interceptors: tuple[Callable[[Core], Interceptor], ...] = ()
    """Tried before the agent, in feature order; each built once the agent exists."""
    resolvers: Mapping[str, TierResolver] = field(default_factory=dict)
    """Who a channel's message is from (the channel's name as the key)."""
    burst_rules: Mapping[str, BurstRule] = field(default_factory=dict)
    """How long a channel's quick messages are gathered into one exchange (the
    channel's name as the key; ``channels.delivery.pipeline``)."""
    routes: tuple[Route, ...] = ()
    prompt_sections: tuple[PromptSection, ...] = ()
    status: tuple[StatusSection, ...] = ()
    """Contributions to ``GET /api/status`` and ``/status``."""
    services: Services = field(default_factory=Services)
    owner_listeners: tuple[OwnerListener, ...] = ()
    """Told when the owner's settings change (``manage_settings``); registered as the
    feature starts, before the features after it."""
    start: Callable[[Core], Awaitable[None]] | None = None
    """What starts once the agent exists (the scheduler's timers); it stops after the
    feature's ``yield``."""


@dataclass(frozen=True, eq=False)
class FeatureContext:
    """What a feature's setup gets: the started core, and the services of the features
    before it."""

    settings: Settings
    database: Database
    outbox: Outbox
    intake: Intake
    """Where the channels' messages are stored; the pipeline handles them once built."""
    channels: Mapping[str, Channel]
    """The running channels, every one built before the features (read-only)."""
    reach: Reach
    """Who the owner is (the settings' and the paired Telegram owners: ``reach.owners``)
    and where they are reached, by every registered channel's rules (``agent.reach``)."""
    clock: Clock
    http: aiohttp.ClientSession
    owner: OwnerSettings
    pairing: Pairing
    services: Services
    exclusive_transports: bool
    """Start transports one account allows only one client of (the WhatsApp session).
    False for ``watchkeeper chat``, which may run beside ``watchkeeper run``."""


Feature = Callable[[FeatureContext], AsyncIterator[Parts]]
"""A part started after the core (scheduler, alerts, MCP...): an async generator that
starts, yields its parts once, then stops (aiohttp's ``cleanup_ctx``)."""


@dataclass(frozen=True)
class Built:
    """A channel its entry built (not yet started), the HTTP routes it mounts, and the
    feature that gives the agent its parts (tools, the resolver that knows its contacts);
    the feature runs before the other features."""

    channel: Channel
    routes: Sequence[Route] = ()
    feature: Feature | None = None


@dataclass(frozen=True, eq=False)
class ChannelSetup:
    """What a ``late`` factory builds its channel with."""

    settings: Settings
    database: Database
    clock: Clock
    exclusive_transports: bool
    """Build transports one account allows only one client of (the WhatsApp session).
    False for ``watchkeeper chat``, which may run beside ``watchkeeper run``."""


@dataclass(frozen=True, eq=False)
class App:
    """The running app, as the composition root built it once from every part."""

    settings: Settings
    database: Database
    deps: AgentDeps
    agent: Agent
    dispatcher: Dispatcher
    outbox: Outbox
    pipeline: Pipeline
    catalog: ToolCatalog
    channels: Mapping[str, Channel]
    clock: Clock
    routes: tuple[Route, ...] = ()
    """HTTP routes (method, path, handler) the channels and features mount on the server."""
    status_sections: tuple[StatusSection, ...] = ()
    """Contributions to ``GET /api/status``, each returning a dict merged into the answer."""
    scheduling: Scheduling | None = None
    """The scheduler's parts, when the scheduling feature runs."""
    monitors: Monitors | None = None
    """The running monitors, when the monitors feature runs."""
    shutdown: Shutdown = field(default_factory=Shutdown)
    """The stop's deadline, shared by every part's stop (``agent.app.shutdown``)."""

    def status(self) -> dict[str, Any]:
        return {name: ch.status() for name, ch in self.channels.items()}
