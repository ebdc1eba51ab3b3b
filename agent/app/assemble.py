"""The agent's half of the app: built once the channels already poll.

Imported by ``agent.app.core`` in a thread after the channels have started (these are
most of the app's modules: the agent, its tools, the scheduler, the features), so a
first long poll is out and what arrives is stored meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import aiohttp

from agent.app.application import App, Feature, Route
from agent.app.features import FEATURES
from agent.app.shutdown import Shutdown
from agent.app.status import install_status_command
from agent.config import Settings
from agent.context import AgentDeps, Clock
from agent.conversation.agent import Agent
from agent.conversation.dispatch import Dispatcher
from agent.conversation.held_sends import confirm_held_send
from agent.conversation.pairing import Pairing
from agent.llm.base import ModelClient
from agent.llm.images import ImageDecoder
from agent.owner import OwnerSettings
from agent.tools.catalog import core_catalog
from channels.delivery.media import MediaCaps, MediaFetcher, MediaStore
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import Channel
from storage.db import Database
from storage.repos.pairing import PairingStore


def default_features() -> list[Feature]:
    """Every optional part, in start order; each decides from the settings to start."""
    return list(FEATURES)


async def assemble(
    settings: Settings,
    model: ModelClient,
    database: Database,
    *,
    outbox: Outbox,
    pipeline: Pipeline,
    channels: dict[str, Channel],
    clock: Clock,
    note: Callable[[str], None],
    stack: contextlib.AsyncExitStack,
    late: contextlib.AsyncExitStack,
    features: Sequence[Feature] | None,
    routes: Sequence[Route],
    exclusive_transports: bool,
    shutdown: Shutdown,
) -> App:
    """The agent, its dispatcher and every feature, on the started core.

    ``stack`` takes what stops before the channels (the features); ``late`` what
    must outlive the pipeline's last handler (the HTTP client, the usage counts).
    ``shutdown``: the stop's deadline, which ``stack`` keeps to (kept on the app).
    """
    http = await late.enter_async_context(aiohttp.ClientSession())
    owner = OwnerSettings(database.db, clock, settings.timezone)
    await owner.load()  # quiet hours, timezone, primary channel (manage_settings)
    images = ImageDecoder()  # one photo decoded at a time, whatever the number of chats
    late.callback(images.close)
    deps = AgentDeps(
        settings=settings,
        db=database.db,
        clock=clock,
        http=http,
        outbox=outbox,
        channels=channels,
        owner=owner,
        images=images,
    )
    late.push_async_callback(deps.usage.close)  # counts written before the DB closes
    note(f"model: {model.name}")
    catalog = core_catalog()
    caps = MediaCaps(settings.media_max_bytes, settings.media_max_audio_seconds)
    media = MediaFetcher(database.db, MediaStore(database.db), channels, caps)
    agent = Agent(model, catalog, media=media)
    dispatcher = Dispatcher(deps=deps, agent=agent)
    # Paired owners known before the dispatcher handles a message from one.
    dispatcher.pairing = Pairing(PairingStore(database.db, clock), settings)
    await dispatcher.pairing.refresh()
    app = App(
        settings,
        database,
        deps,
        agent,
        dispatcher,
        outbox,
        pipeline,
        catalog,
        channels,
        clock,
        shutdown=shutdown,
    )
    app.exclusive_transports = exclusive_transports
    app.routes.extend(routes)
    for feature in features if features is not None else default_features():
        await feature(app, stack)
    # Before alert directives: "send 4711" releases a held message, nothing else.
    dispatcher.interceptors.insert(0, confirm_held_send)
    install_status_command(app)
    return app
