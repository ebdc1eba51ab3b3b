"""The agent's half of the app: built once the channels already poll.

Imported by ``agent.app.core`` in a thread after the channels have started (these are
most of the app's modules: the agent, its tools, the scheduler, the features), so a
first long poll is out and what arrives is stored meanwhile.

The features start in order, each seeing the services of those before it; then the
services, the tool catalogue, the agent and the dispatcher are built once from their
parts, and the parts that need the agent start. They stop in reverse order.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import aiohttp

from agent.app.application import App, Core, Feature, FeatureContext, Parts, Route, Services
from agent.app.features import FEATURES
from agent.app.registry import REGISTRY, ChannelEntry
from agent.app.registry import reach as registry_reach
from agent.app.shutdown import Shutdown
from agent.app.status import StatusBoard, budget_section, status_command
from agent.config import Settings
from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.conversation.dispatch import Command, Dispatcher, Interceptor, TierResolver
from agent.conversation.held_sends import confirming
from agent.conversation.pairing import Pairing
from agent.llm.base import ModelClient
from agent.llm.images import ImageDecoder
from agent.owner import OwnerSettings
from agent.tools.catalog import core_catalog
from channels.delivery.media import MediaCaps, MediaFetcher, MediaStore
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import Channel
from runtime.clock import Clock
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
    channels: Mapping[str, Channel],
    clock: Clock,
    note: Callable[[str], None],
    stack: contextlib.AsyncExitStack,
    late: contextlib.AsyncExitStack,
    features: Sequence[Feature] | None,
    routes: Sequence[Route],
    exclusive_transports: bool,
    shutdown: Shutdown,
    registry: Sequence[ChannelEntry] = REGISTRY,
    channel_features: Sequence[Feature] = (),
) -> App:
    """The agent, its dispatcher and every feature, on the started core.

    ``stack`` takes what stops before the channels (the features); ``late`` what
    must outlive the pipeline's last handler (the HTTP client, the usage counts).
    ``shutdown``: the stop's deadline, which ``stack`` keeps to (kept on the app).
    ``registry``: the channels' rules (``agent.reach``); ``channel_features``: what the
    channels give the agent (tools, resolvers), run before the other features.
    """
    http = await late.enter_async_context(aiohttp.ClientSession())
    owner = OwnerSettings(database.db, clock, settings.timezone)
    await owner.load()  # quiet hours, timezone, primary channel (manage_settings)
    images = ImageDecoder()  # one photo decoded at a time, whatever the number of chats
    late.callback(images.close)
    # Paired owners known before the dispatcher handles a message from one.
    pairing = Pairing(PairingStore(database.db, clock), settings)
    await pairing.refresh()
    reach = registry_reach(settings, channels, registry)
    services = Services()
    every: list[Parts] = []
    chosen = [*channel_features, *(features if features is not None else default_features())]
    for feature in chosen:
        ctx = FeatureContext(
            settings=settings,
            database=database,
            outbox=outbox,
            pipeline=pipeline,
            channels=channels,
            reach=reach,
            clock=clock,
            http=http,
            owner=owner,
            pairing=pairing,
            services=services,
            exclusive_transports=exclusive_transports,
        )
        parts = await enter_feature(feature, ctx, stack)
        services = services.merged(parts.services)
        every.append(parts)
    scheduling = services.scheduling
    deps = AgentDeps(
        settings=settings,
        db=database.db,
        clock=clock,
        http=http,
        outbox=outbox,
        channels=channels,
        reach=reach,
        alerts=services.alerts,
        cron=scheduling.jobs if scheduling is not None else None,
        pulse=scheduling.pulse if scheduling is not None else None,
        scheduler=scheduling.engine if scheduling is not None else None,
        owner=owner,
        mcp=services.mcp,
        images=images,
    )
    late.push_async_callback(deps.usage.close)  # counts written before the DB closes
    note(f"model: {model.name}")
    catalog = core_catalog(offer for parts in every for offer in parts.tools)
    caps = MediaCaps(settings.media_max_bytes, settings.media_max_audio_seconds)
    media = MediaFetcher(database.db, MediaStore(database.db), channels, caps)
    sections = [section for parts in every for section in parts.prompt_sections]
    agent = Agent(model, catalog, sections, media=media)
    core = Core(deps, agent)
    status_sections = (
        *(section for parts in every for section in parts.status),
        budget_section(deps),
    )
    board = StatusBoard(channels, outbox, status_sections)
    commands: dict[str, Command] = {}
    resolvers: dict[str, TierResolver] = {}
    # First: "send 4711" releases what was held, nothing else (before alert directives).
    interceptors: list[Interceptor] = [confirming(catalog)]
    for parts in every:
        commands.update(parts.commands)
        resolvers.update(parts.resolvers)
        interceptors.extend(build(core) for build in parts.interceptors)
    commands["/status"] = status_command(board, model.name)
    dispatcher = Dispatcher(
        deps=deps,
        agent=agent,
        resolvers=resolvers,
        commands=commands,
        interceptors=tuple(interceptors),
        pairing=pairing,
    )
    for parts in every:
        if parts.start is not None:
            await parts.start(core)
    return App(
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
        routes=(*routes, *(route for parts in every for route in parts.routes)),
        status_sections=status_sections,
        scheduling=scheduling,
        shutdown=shutdown,
    )


async def enter_feature(
    feature: Feature, ctx: FeatureContext, stack: contextlib.AsyncExitStack
) -> Parts:
    """Run ``feature`` up to its ``yield``; the rest of it (its stop) goes on ``stack``
    and runs whether the app stops normally or its start-up failed later on, as
    aiohttp's ``cleanup_ctx``."""
    steps: AsyncIterator[Parts] = feature(ctx)
    parts = await anext(steps)

    async def stop() -> None:
        try:
            await anext(steps)
        except StopAsyncIteration:
            return
        raise RuntimeError(f"feature {feature!r} yielded more than once")

    # Named after the feature: a stop cut short at the deadline is logged by its name.
    stop.__qualname__ = getattr(feature, "__qualname__", repr(feature))
    stack.push_async_callback(stop)
    return parts
