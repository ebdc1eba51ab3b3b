"""The composition root: builds every part once and stops them in reverse order.

Nothing else in the project wires concrete channels to the agent.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from agent.config import Settings
from agent.context import AgentDeps, Clock, system_clock
from agent.conversation.agent import Agent
from agent.conversation.dispatch import COMMAND_HELP, Dispatcher
from agent.llm.base import ModelClient
from agent.tools.catalog import ToolCatalog, core_catalog
from channels.outbox import Outbox
from channels.pipeline import Pipeline
from channels.types import Channel
from storage.db import Database, open_database

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
StatusSection = Callable[[], Awaitable[dict[str, Any]]]
Feature = Callable[["App", contextlib.AsyncExitStack], Awaitable[None]]
"""A part started after the core (scheduler, alerts, SMS...): it registers tools,
commands, routes and status sections on the app and pushes its own teardown."""


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
    clock: Clock = system_clock
    routes: list[tuple[str, str, Handler]] = field(default_factory=list)
    """Extra HTTP routes (method, path, handler) that features mount on the server."""
    status_sections: list[StatusSection] = field(default_factory=list)
    """Contributions to ``GET /api/status``, each returning a dict merged into the answer."""
    exclusive_transports: bool = True
    """Start transports one account allows only one client of (the WhatsApp session).
    False for ``watchkeeper chat``, which may run beside ``watchkeeper run``."""

    def status(self) -> dict[str, Any]:
        return {name: ch.status() for name, ch in self.channels.items()}


def configured_channels(settings: Settings) -> list[Channel]:
    """Channels whose settings are present; each import happens only when enabled."""
    found: list[Channel] = []
    if settings.telegram_bot_token is not None:
        from channels.telegram import TelegramChannel

        found.append(
            TelegramChannel(
                token=settings.telegram_bot_token.get_secret_value(),
                base_url=settings.telegram_api_base_url,
                webhook_url=settings.telegram_webhook_url,
                webhook_secret=(
                    settings.telegram_webhook_secret.get_secret_value()
                    if settings.telegram_webhook_secret
                    else None
                ),
                commands=list(COMMAND_HELP.items()),
            )
        )
    return found


@contextlib.asynccontextmanager
async def build_app(
    settings: Settings,
    *,
    model: ModelClient | None = None,
    channels: list[Channel] | None = None,
    clock: Clock = system_clock,
    on_part: Callable[[str], None] | None = None,
    features: Sequence[Feature] | None = None,
    exclusive_transports: bool = True,
) -> AsyncIterator[App]:
    """Start the database, the agent, the pipeline and the channels; stop in reverse."""
    note = on_part or (lambda text: log.info("%s", text))
    async with contextlib.AsyncExitStack() as stack:
        if model is None:
            # First, so a missing key stops start-up before anything is started.
            from agent.llm.factory import build_model

            model = build_model(settings)
            stack.push_async_callback(model.aclose)
        database = await stack.enter_async_context(
            open_database(settings.mongodb_uri, settings.mongodb_db, settings.data_dir)
        )
        where = f"embedded in {settings.data_dir}" if database.embedded else "MongoDB"
        note(f"database: {where} ({settings.mongodb_db})")
        http = await stack.enter_async_context(aiohttp.ClientSession())
        deps = AgentDeps(settings=settings, db=database.db, clock=clock, http=http)
        note(f"model: {model.name}")
        catalog = core_catalog()
        agent = Agent(model, catalog)
        dispatcher = Dispatcher(deps=deps, agent=agent)
        chans: dict[str, Channel] = {}
        outbox = Outbox(database.db, chans, clock)
        pipeline = Pipeline(
            database.db,
            dispatcher.handle,
            outbox,
            chans,
            clock,
            max_concurrency=settings.max_concurrent_model_calls,
        )
        deps.services.update(outbox=outbox, pipeline=pipeline, channels=chans)
        app = App(
            settings, database, deps, agent, dispatcher, outbox, pipeline, catalog, chans, clock
        )
        app.exclusive_transports = exclusive_transports
        # The owner of the embedded server (DATA_DIR lock) is the only process that
        # can have been sending; anywhere else a send may still be in flight.
        await outbox.start(sole_owner=database.owns_server)
        stack.push_async_callback(outbox.stop)
        stack.push_async_callback(pipeline.stop)
        for channel in channels if channels is not None else configured_channels(settings):
            await channel.start(pipeline.submit)
            stack.push_async_callback(channel.stop)
            chans[channel.name] = channel
            note(f"channel: {channel.name}")
        for feature in features if features is not None else default_features():
            await feature(app, stack)
        from agent.app.status import install_status_command

        install_status_command(app)
        await pipeline.recover(sole_owner=database.owns_server)
        yield app


def default_features() -> list[Feature]:
    """Every optional part, in start order; each decides from the settings to start."""
    from agent.app.features import FEATURES

    return list(FEATURES)
