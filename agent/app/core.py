"""The composition root: builds every part once and stops them in reverse order.

Nothing else in the project wires concrete channels to the agent: every transport,
feature, HTTP route and status section is built by this package.

Start-up order: the database, the outbox and the inbound pipeline, then the channels
(a long poll goes out as soon as what arrives can be stored), then the agent and the
features (``agent.app.assemble``, imported in a thread meanwhile). A message that
arrives before the agent exists is stored and acknowledged, and waits for it
(``agent.app.gate``). This module imports only what the channels need.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

from agent.app.gate import HandlerGate
from agent.app.parts import TELEGRAM_WEBHOOK, App, Feature, Route
from agent.config import Settings, ensure_data_dir
from agent.database import open_configured_database
from agent.llm.factory import build_model, check_model
from agent.llm.lazy_sdk import warm_model
from channels.outbox import Outbox
from channels.pipeline import Pipeline
from channels.types import Channel
from storage.repos import utcnow
from storage.tasks import stop_task

if TYPE_CHECKING:
    from agent.context import Clock
    from agent.llm.base import ModelClient
    from storage.embedded import EmbeddedServer

__all__ = ["App", "Feature", "build_app", "configured_channels", "default_features", "preloaded"]

log = logging.getLogger(__name__)
WARM_AFTER = 0.3
"""Seconds after start-up before the model SDK loads: the first long poll goes first."""
ASSEMBLY = "agent.app.assemble"
"""The agent's modules (most of the app's), imported once the channels poll."""


def configured_channels(settings: Settings) -> list[tuple[Channel, list[Route]]]:
    """Channels whose settings are present, with the HTTP routes each needs; each
    import happens only when enabled (a channel's SDK costs memory)."""
    found: list[tuple[Channel, list[Route]]] = []
    if settings.telegram_bot_token is not None:
        from agent.conversation.commands import COMMAND_HELP
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


def preloaded(settings: Settings, *, model: bool, channels: bool) -> list[str]:
    """Modules ``build_app`` loads in a thread while the database starts: aiohttp (the
    HTTP client of the model, of Telegram and of the app) and the channels' own."""
    names = ["aiohttp"] if model or channels else []
    if channels and settings.telegram_bot_token is not None:
        names += ["channels.telegram", "agent.conversation.commands"]  # the command menu
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
    on_warm: Callable[[], object] | None = None,
) -> AsyncIterator[App]:
    """Start the database, the pipeline, the channels and the agent; stop in reverse.

    ``embedded``: the embedded database server to use when ``MONGODB_URI`` is unset
    (``watchkeeper run`` launches it before its slow imports). ``on_warm``: called
    once the model's SDK has loaded (``watchkeeper run`` freezes its heap then)."""
    note = on_part or (lambda text: log.info("%s", text))
    clock = clock or utcnow  # the system clock (agent.context's, without its imports)
    async with contextlib.AsyncExitStack() as stack:
        if model is None:
            check_model(settings)  # a missing key stops start-up before anything starts
        if settings.embedded_db or settings.whatsapp_enabled:
            ensure_data_dir(settings.data_dir)  # one line, not a traceback from deep inside
        # The database starts (its process boots, its indexes are built) on the event
        # loop while the modules of the model and of the channels load in a thread.
        opening = asyncio.ensure_future(
            stack.enter_async_context(open_configured_database(settings, server=embedded))
        )
        chans: dict[str, Channel] = {}
        try:
            modules = preloaded(settings, model=model is None, channels=channels is None)
            await asyncio.to_thread(_load, modules)
            if model is None:
                model = build_model(settings)
                stack.push_async_callback(model.aclose)
            parts: list[tuple[Channel, list[Route]]] = (
                [(channel, []) for channel in channels]
                if channels is not None
                else configured_channels(settings)
            )
            # Their set-up (Telegram: the token check, the command menu, no webhook)
            # runs while the database starts; they poll once it can store what arrives.
            preparing = {
                channel.name: asyncio.create_task(prepare(), name=f"prepare {channel.name}")
                for channel, _routes in parts
                if (prepare := getattr(channel, "prepare", None)) is not None
            }

            async def unprepare() -> None:
                """Start-up failed before a prepared channel started: close its client."""
                for name, task in preparing.items():
                    await stop_task(task)
                    if name not in chans:
                        await next(c for c, _ in parts if c.name == name).stop()

            stack.push_async_callback(unprepare)
            database = await opening
        except BaseException:
            await stop_task(opening)  # once open, the stack closes it
            raise
        where = f"embedded in {settings.data_dir}" if database.embedded else "MongoDB"
        note(f"database: {where} ({settings.mongodb_db})")
        # What the pipeline's handlers use (HTTP client, usage counts) closes after it.
        late = await stack.enter_async_context(contextlib.AsyncExitStack())
        outbox = Outbox(database.db, chans, clock)
        gate = HandlerGate()
        # No cap here: the model's adaptive limit paces model calls.
        pipeline = Pipeline(database.db, gate, outbox, chans, clock)
        # The owner of the embedded server (DATA_DIR lock) is the only process that
        # can have been sending; anywhere else a send may still be in flight.
        await outbox.start(sole_owner=database.owns_server)
        stack.push_async_callback(outbox.stop)
        stack.push_async_callback(pipeline.stop)

        async def stop_waiting() -> None:
            """Start-up failed: messages waiting at the gate stay stored, unfinished,
            and the next start resumes them."""
            if not gate.opened:
                await pipeline.stop(grace=0)

        stack.push_async_callback(stop_waiting)
        # Before the channels: what a dead process left comes before anything new.
        await pipeline.recover(sole_owner=database.owns_server)
        await asyncio.gather(*preparing.values())
        for channel, _routes in parts:
            await channel.start(pipeline.submit)
            stack.push_async_callback(channel.stop)
            chans[channel.name] = channel
            note(f"channel: {channel.name}")
        # Off the event loop: the long poll goes out, and updates are stored, meanwhile.
        await asyncio.to_thread(importlib.import_module, ASSEMBLY)
        from agent.app.assemble import assemble

        app = await assemble(
            settings,
            model,
            database,
            outbox=outbox,
            pipeline=pipeline,
            channels=chans,
            clock=clock,
            note=note,
            stack=stack,
            late=late,
            features=features,
            routes=[route for _channel, routes in parts for route in routes],
            exclusive_transports=exclusive_transports,
        )
        gate.open(app.dispatcher.handle)
        # The parts' tasks take their first step (WhatsApp's supervisor: connect) before
        # the app is handed out, as when recovery came last.
        await asyncio.sleep(0)
        # The model's SDK loads in a thread once the channels poll (``lazy_sdk``).
        warming = asyncio.create_task(_warm(model, on_warm), name="warm model")
        stack.push_async_callback(stop_task, warming)
        yield app


async def _warm(model: ModelClient, then: Callable[[], object] | None) -> None:
    await warm_model(model, WARM_AFTER)
    if then is not None:
        then()


def default_features() -> list[Feature]:
    """Every optional part, in start order; each decides from the settings to start."""
    from agent.app.assemble import default_features as every

    return every()
