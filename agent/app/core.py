"""The composition root: builds every part once and stops them in reverse order.

Nothing else in the project wires concrete channels to the agent: every transport,
feature, HTTP route and status section is built by this package.

Start-up order: the early channels (their first long poll goes out while the database
client loads and the database opens), the channels that need the database, each built
by its entry in the channel registry (``agent.app.registry``), then the outbox and
the intake with the finished mapping of channels, then the agent, the features and
the pipeline that hands messages to the agent (``agent.app.assemble``, imported in a
thread meanwhile). A message read before the database is open waits unstored, so
unacknowledged (``agent.app.gate``); one that arrives before the agent exists is
stored and acknowledged, and waits in the intake's queue for the pipeline
(``channels.delivery.intake``). This module imports only what the channels need.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from agent.app.application import App, Built, ChannelSetup, Feature
from agent.app.gate import SinkGate
from agent.app.registry import REGISTRY, ChannelEntry
from agent.app.shutdown import Shutdown, ShutdownStack
from agent.config import Settings, ensure_data_dir
from agent.llm.factory import build_model, check_model
from agent.llm.lazy_sdk import warm_model
from channels.types import Channel
from runtime.clock import utcnow
from runtime.tasks import stop_task

if TYPE_CHECKING:
    from agent.llm.base import ModelClient
    from runtime.clock import Clock
    from storage.db import Database
    from storage.embedded.owner import EmbeddedServer

__all__ = ["App", "Feature", "build_app", "configured_channels", "default_features", "preloaded"]

log = logging.getLogger(__name__)
DATABASE_MODULES = ("storage.db", "channels.delivery.intake", "channels.delivery.outbox")
"""The database client (pymongo), the intake's and the outbox's: loaded once the
channels' are."""
ASSEMBLY = "agent.app.assemble"
"""The agent's modules (most of the app's), imported once the channels poll."""


def configured_channels(
    settings: Settings, registry: Sequence[ChannelEntry] = REGISTRY
) -> list[Built]:
    """The early channels (``agent.app.registry``) the settings set up, with the HTTP
    routes each mounts; each import happens only when enabled (a channel's SDK costs
    memory)."""
    return [
        entry.early(settings)
        for entry in registry
        if entry.early is not None and entry.rules.configured(settings)
    ]


def preloaded(
    settings: Settings, *, model: bool, channels: bool, registry: Sequence[ChannelEntry] = REGISTRY
) -> list[str]:
    """Modules ``build_app`` loads in a thread while the database starts: aiohttp (the
    HTTP client of the model, of Telegram and of the app) and the early channels' own."""
    names = ["aiohttp"] if model or channels else []
    if channels:
        for entry in registry:
            if entry.early is not None and entry.rules.configured(settings):
                names += entry.preload
    return names


def _load(names: Sequence[str]) -> None:
    for name in names:
        importlib.import_module(name)


@contextlib.asynccontextmanager
async def build_app(
    settings: Settings,
    *,
    model: ModelClient | None = None,
    channels: list[Channel] | None = None,
    clock: Clock | None = None,
    on_part: Callable[[str], None] | None = None,
    features: Sequence[Feature] | None = None,
    exclusive_transports: bool = True,
    embedded: EmbeddedServer | None = None,
    shutdown: Shutdown | None = None,
    cli: str = "watchkeeper",
    registry: Sequence[ChannelEntry] = REGISTRY,
) -> AsyncIterator[App]:
    """Start the channels, the database, the pipeline and the agent; stop in reverse.

    ``embedded``: the embedded database server to use when ``MONGODB_URI`` is unset
    (``watchkeeper run`` launches it before its slow imports, and stops it after).
    ``shutdown``: the stop's shared deadline (``agent.app.shutdown``), kept on the app
    so the HTTP server's stop shares it; the database closes after it, within its own
    bounds, so a database that does not answer cannot hold the stop.
    ``cli``: how the owner runs the command line (``watchkeeper pair CODE``), as the
    hints in the log and to a Telegram stranger name it; the CLI passes its own.
    ``registry``: the channels (``agent.app.registry``): the early ones start before
    the database opens unless ``channels`` are given, the late ones once it is open,
    all before the outbox and the intake, which get the finished mapping; every
    channel's rules (who the owner is, how alerts reach them) come from it."""
    note = on_part or (lambda text: log.info("%s", text))
    clock = clock or utcnow  # the system clock (agent.context's, without its imports)
    shutdown = shutdown or Shutdown()
    async with contextlib.AsyncExitStack() as base:
        if model is None:
            check_model(settings)  # a missing key stops start-up before anything starts
        if settings.embedded_db or settings.whatsapp_enabled:
            ensure_data_dir(settings.data_dir)  # one line, not a traceback from deep inside
        # The channels' modules first (a thread: the event loop stays free for signals).
        modules = preloaded(
            settings, model=model is None, channels=channels is None, registry=registry
        )
        await asyncio.to_thread(_load, modules)
        if model is None:
            model = build_model(settings)
            base.push_async_callback(shutdown.bounded("the model client", model.aclose))
        parts: list[Built] = (
            [Built(channel) for channel in channels]
            if channels is not None
            else configured_channels(settings, registry)
        )
        # Closed after the channels have stopped: nothing they read is left half-stored.
        # Not on the shared deadline: it closes within its own bounds, after every part.
        data = await base.enter_async_context(contextlib.AsyncExitStack())
        # Every part's stop from here on keeps to the shared deadline.
        stack = await base.enter_async_context(ShutdownStack(shutdown))
        # While the channels set up and send their first long poll: the database
        # client's modules load in a thread, then the database opens on the event loop
        # (mostly waiting for it) and the agent's modules load in the thread meanwhile.
        client = asyncio.ensure_future(asyncio.to_thread(_load, DATABASE_MODULES))
        opening = asyncio.ensure_future(_open_database(settings, embedded, data, client))
        agent_modules = asyncio.ensure_future(_load_after(client, (ASSEMBLY,)))
        # The first message read starts the model's SDK loading (``agent.llm.lazy_sdk``):
        # a message waiting at start is answered as the database opens, not after.
        warming: list[asyncio.Task[None]] = []
        store = SinkGate(first=lambda: warming.append(asyncio.create_task(warm_model(model))))
        stack.push_async_callback(_stop_each, warming)
        chans: dict[str, Channel] = {}

        async def start(built: Built) -> None:
            # What a channel reads before the pipeline exists waits at the gate,
            # unstored and so unacknowledged (``agent.app.gate``).
            await built.channel.start(store)
            stack.push_async_callback(built.channel.stop)
            chans[built.channel.name] = built.channel
            note(f"channel: {built.channel.name}")

        try:
            for built in parts:
                await start(built)
            database = await opening
        except BaseException:
            await stop_task(opening)  # once open, ``data`` closes it
            for loading in (agent_modules, client):
                await stop_task(loading)  # (a thread's import runs on, unawaited)
            raise
        stack.push_async_callback(stop_task, agent_modules)  # start-up may fail before it is needed
        where = f"embedded in {settings.data_dir}" if database.embedded else "MongoDB"
        note(f"database: {where} ({settings.mongodb_db})")
        # The channels that need the database, before anything is given the channels.
        setup = ChannelSetup(settings, database, clock, exclusive_transports)
        for entry in registry:
            if entry.late is None or entry.name in chans or not entry.rules.configured(settings):
                continue
            made = entry.late(setup)
            if made is not None:
                await start(made)
                parts.append(made)
        running: Mapping[str, Channel] = MappingProxyType(chans)  # complete: never changed
        from channels.delivery.intake import Intake  # loaded with the database client
        from channels.delivery.outbox import Outbox

        # What the pipeline's handlers use (HTTP client, usage counts) closes after it.
        late = await stack.enter_async_context(
            contextlib.AsyncExitStack(), name="the agent's HTTP client and token counts"
        )
        outbox = Outbox(database.db, running, clock)
        # The owner of the embedded server (DATA_DIR lock) is the only process that
        # can have been sending; anywhere else a send may still be in flight.
        await outbox.start(sole_owner=database.owns_server)
        stack.push_async_callback(outbox.stop)
        # The pipeline (built with the agent) stops here: after the features, before
        # the outbox. Messages still queued when start-up fails stay unfinished, stored,
        # and the next start resumes them.
        handling = await stack.enter_async_context(contextlib.AsyncExitStack(), name="the pipeline")
        intake = Intake(database.db, clock)
        stack.push_async_callback(intake.stop)
        # Before what the channels read: what a dead process left comes before anything new.
        await intake.recover(sole_owner=database.owns_server)
        store.open(intake.submit)
        await agent_modules  # off the event loop: updates are stored meanwhile
        from agent.app.assemble import assemble

        app = await assemble(
            settings,
            model,
            database,
            outbox=outbox,
            intake=intake,
            handling=handling,
            channels=running,
            clock=clock,
            note=note,
            stack=stack,
            late=late,
            features=features,
            routes=[route for built in parts for route in built.routes],
            channel_features=[built.feature for built in parts if built.feature is not None],
            exclusive_transports=exclusive_transports,
            shutdown=shutdown,
            cli=cli,
            registry=registry,
        )
        # The parts' tasks take their first step (WhatsApp's supervisor: connect) before
        # the app is handed out, as when recovery came last.
        await asyncio.sleep(0)
        yield app


async def _open_database(
    settings: Settings,
    embedded: EmbeddedServer | None,
    stack: contextlib.AsyncExitStack,
    client: Awaitable[None],
) -> Database:
    """The database, opened into ``stack`` once ``client`` (its modules) has loaded."""
    await asyncio.shield(client)
    from storage.db import open_configured  # pymongo: loaded when a database opens

    return await stack.enter_async_context(open_configured(settings, server=embedded))


async def _stop_each(tasks: Sequence[asyncio.Task[None]]) -> None:
    for task in tasks:
        await stop_task(task)


async def _load_after(first: Awaitable[None], names: Sequence[str]) -> None:
    """``names`` imported in a thread once ``first`` is done."""
    await asyncio.shield(first)
    await asyncio.to_thread(_load, names)


def default_features() -> list[Feature]:
    """Every optional part, in start order; each decides from the settings to start."""
    from agent.app.assemble import default_features as every

    return every()
