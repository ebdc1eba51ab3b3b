"""The composition root: builds every part once and stops them in reverse order.

Nothing else in the project wires concrete channels to the agent: every transport,
feature, HTTP route and status section is built by this package.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

import aiohttp

from agent.app.features import FEATURES
from agent.app.parts import TELEGRAM_WEBHOOK, App, Feature, Route
from agent.app.status import install_status_command
from agent.config import Settings, ensure_data_dir
from agent.context import AgentDeps, Clock, system_clock
from agent.conversation.agent import Agent
from agent.conversation.dispatch import COMMAND_HELP, Dispatcher
from agent.conversation.held_sends import confirm_held_send
from agent.conversation.pairing import Pairing
from agent.llm.base import ModelClient
from agent.llm.factory import build_model
from agent.llm.lazy_sdk import warm_model
from agent.tools.catalog import core_catalog
from channels.media import MediaCaps, MediaFetcher
from channels.outbox import Outbox
from channels.pipeline import Pipeline
from channels.types import Channel
from scheduler.owner_settings import OwnerSettings
from storage.db import open_database
from storage.media import MediaStore
from storage.pairing import PairingStore
from storage.tasks import stop_task

if TYPE_CHECKING:
    from storage.embedded import EmbeddedServer

log = logging.getLogger(__name__)
WARM_AFTER = 0.3
"""Seconds after start-up before the model SDK loads: the first long poll goes first."""


def configured_channels(settings: Settings) -> list[tuple[Channel, list[Route]]]:
    """Channels whose settings are present, with the HTTP routes each needs; each
    import happens only when enabled (a channel's SDK costs memory)."""
    found: list[tuple[Channel, list[Route]]] = []
    if settings.telegram_bot_token is not None:
        from channels.telegram import TelegramChannel

        telegram = TelegramChannel(
            token=settings.telegram_bot_token.get_secret_value(),
            base_url=settings.telegram_api_base_url,
            webhook_url=settings.telegram_webhook_url,
            webhook_secret=(
                settings.telegram_webhook_secret.get_secret_value()
                if settings.telegram_webhook_secret
                else None
            ),
            commands=list(COMMAND_HELP.items()),
            read_timeout=settings.http_read_timeout_seconds,
            media_max_bytes=settings.media_max_bytes,
        )
        routes: list[Route] = []
        if settings.telegram_webhook_url:
            routes.append(("POST", TELEGRAM_WEBHOOK, telegram.handle_webhook))
        found.append((telegram, routes))
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
    embedded: EmbeddedServer | None = None,
) -> AsyncIterator[App]:
    """Start the database, the agent, the pipeline and the channels; stop in reverse.

    ``embedded``: the embedded database server to use when ``MONGODB_URI`` is unset
    (``watchkeeper run`` launches it before its slow imports)."""
    note = on_part or (lambda text: log.info("%s", text))
    async with contextlib.AsyncExitStack() as stack:
        if model is None:
            # First, so a missing key stops start-up before anything is started.
            model = build_model(settings)
            stack.push_async_callback(model.aclose)
        # Built (their SDKs imported) before the database is awaited: its process boots
        # meanwhile when ``watchkeeper run`` launched it early.
        parts: list[tuple[Channel, list[Route]]] = (
            [(channel, []) for channel in channels]
            if channels is not None
            else configured_channels(settings)
        )
        if settings.embedded_db or settings.whatsapp_enabled:
            ensure_data_dir(settings.data_dir)  # one line, not a traceback from deep inside
        database = await stack.enter_async_context(
            open_database(
                settings.mongodb_uri,
                settings.mongodb_db,
                settings.data_dir,
                idle_timeout=settings.embedded_db_idle_timeout_seconds,
                server=embedded,
            )
        )
        where = f"embedded in {settings.data_dir}" if database.embedded else "MongoDB"
        note(f"database: {where} ({settings.mongodb_db})")
        http = await stack.enter_async_context(aiohttp.ClientSession())
        chans: dict[str, Channel] = {}
        outbox = Outbox(database.db, chans, clock)
        owner = OwnerSettings(database.db, clock, settings.timezone)
        await owner.load()  # quiet hours, timezone, primary channel (manage_settings)
        deps = AgentDeps(
            settings=settings,
            db=database.db,
            clock=clock,
            http=http,
            outbox=outbox,
            channels=chans,
            owner=owner,
        )
        stack.push_async_callback(deps.usage.close)  # counts written before the DB closes
        note(f"model: {model.name}")
        catalog = core_catalog()
        agent = Agent(model, catalog)
        dispatcher = Dispatcher(deps=deps, agent=agent)
        # Paired owners known before any channel delivers a message from one.
        dispatcher.pairing = Pairing(PairingStore(database.db, clock), settings)
        await dispatcher.pairing.refresh()
        caps = MediaCaps(settings.media_max_bytes, settings.media_max_audio_seconds)
        dispatcher.media = MediaFetcher(database.db, MediaStore(database.db), chans, caps)
        pipeline = Pipeline(
            database.db,
            dispatcher.handle,
            outbox,
            chans,
            clock,  # no cap here: the model's adaptive limit paces model calls
        )
        app = App(
            settings, database, deps, agent, dispatcher, outbox, pipeline, catalog, chans, clock
        )
        app.exclusive_transports = exclusive_transports
        # The owner of the embedded server (DATA_DIR lock) is the only process that
        # can have been sending; anywhere else a send may still be in flight.
        await outbox.start(sole_owner=database.owns_server)
        stack.push_async_callback(outbox.stop)
        stack.push_async_callback(pipeline.stop)
        for channel, routes in parts:
            await app.add_channel(channel, stack)
            app.routes.extend(routes)
            note(f"channel: {channel.name}")
        for feature in features if features is not None else default_features():
            await feature(app, stack)
        # Before alert directives: "send 4711" releases a held message, nothing else.
        dispatcher.interceptors.insert(0, confirm_held_send)
        install_status_command(app)
        await pipeline.recover(sole_owner=database.owns_server)
        # The model's SDK loads in a thread once the channels poll (``lazy_sdk``).
        warming = asyncio.create_task(warm_model(model, WARM_AFTER), name="warm model")
        stack.push_async_callback(stop_task, warming)
        yield app


def default_features() -> list[Feature]:
    """Every optional part, in start order; each decides from the settings to start."""
    return list(FEATURES)
