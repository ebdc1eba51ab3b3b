"""The agent's half of the app: built once the channels already poll.

Imported by ``agent.app.core`` in a thread after the channels have started (these are
most of the app's modules: the agent, its tools, the scheduler, the features), so a
first long poll is out and what arrives is stored meanwhile.

The features start in order, each seeing the services of those before it; then the
services, the tool catalogue, the agent, the dispatcher and the pipeline (with every
feature's burst rules) are built once from their parts, and the parts that need the
agent start. They stop in reverse order.
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
from agent.app.status import StatusBoard, budget_section, status_command, zone_section
from agent.config import Settings
from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.conversation.buttons import pressing
from agent.conversation.dispatch import Command, Dispatcher, Interceptor, TierResolver
from agent.conversation.held_sends import confirming
from agent.conversation.pairing import Pairing
from agent.conversation.summary import Summaries
from agent.llm.base import ModelClient
from agent.llm.images import ImageDecoder
from agent.owner import OwnerSettings
from agent.reach import Owners
from agent.tools.catalog import core_catalog
from channels.delivery.intake import Intake
from channels.delivery.media import MediaCaps, MediaFetcher
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import Channel
from runtime.clock import Clock
from storage.db import Database
from storage.repos.media_files import MediaStore
from storage.repos.pairing import PairingStore

AFTER_PIPELINE = 1.0
"""Seconds of the stop budget kept for what stops after the pipeline (the outbox, the
channels): the pipeline's handlers get the rest."""


def default_features() -> list[Feature]:
    """Every optional part, in start order; each decides from the settings to start."""
    return list(FEATURES)


async def assemble(
    settings: Settings,
    model: ModelClient,
    database: Database,
    *,
    outbox: Outbox,
    intake: Intake,
    handling: contextlib.AsyncExitStack,
    channels: Mapping[str, Channel],
    clock: Clock,
    note: Callable[[str], None],
    stack: contextlib.AsyncExitStack,
    late: contextlib.AsyncExitStack,
    features: Sequence[Feature] | None,
    routes: Sequence[Route],
    exclusive_transports: bool,
    shutdown: Shutdown,
    cli: str,
    registry: Sequence[ChannelEntry] = REGISTRY,
    channel_features: Sequence[Feature] = (),
) -> App:
    """The agent, its dispatcher and every feature, on the started core.

    ``stack`` takes what stops before the channels (the features); ``late`` what
    must outlive the pipeline's last handler (the HTTP client, the usage counts);
    ``handling`` the pipeline's stop. The pipeline takes what ``intake`` stored
    (and stores) once the dispatcher exists.
    ``shutdown``: the stop's deadline, which ``stack`` keeps to (kept on the app).
    ``cli``: how the owner runs the command line, as the pairing hints name it.
    ``registry``: the channels' rules (``agent.reach``); ``channel_features``: what the
    channels give the agent (tools, resolvers, burst rules), run before the other
    features.
    """
    http = await late.enter_async_context(aiohttp.ClientSession())
    owner = OwnerSettings(database.db, clock, settings.timezone)
    await owner.load()  # quiet hours, timezone, primary channel (manage_settings)
    images = ImageDecoder()  # one photo decoded at a time, whatever the number of chats
    late.callback(images.close)
    # Paired owners known before the dispatcher handles a message from one.
    store = PairingStore(database.db, clock)
    owners = Owners(settings, store)
    zone_chosen = settings.timezone_chosen
    pairing = Pairing(
        store, owners, cli=cli, zone_known=lambda: zone_chosen or owner.current.zone_stored
    )
    await owners.refresh()
    # Who the owner is (``owners``) and where they are reached, by every channel's rules.
    reach = registry_reach(owners, channels, registry)
    services = Services()
    every: list[Parts] = []
    chosen = [*channel_features, *(features if features is not None else default_features())]
    for feature in chosen:
        ctx = FeatureContext(
            settings=settings,
            database=database,
            outbox=outbox,
            intake=intake,
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
        for listener in parts.owner_listeners:
            owner.listen(listener)
        services = services.merged(parts.services)
        every.append(parts)
    scheduling = services.scheduling
    deps = AgentDeps(
        settings=settings,
        db=database.db,
        query_db=database.queries,
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
    late.push_async_callback(deps.budget.close)  # the block given back, before usage
    note(f"model: {model.name}")
    catalog = core_catalog(offer for parts in every for offer in parts.tools)
    caps = MediaCaps(settings.media_max_bytes, settings.media_max_audio_seconds)
    media = MediaFetcher(MediaStore(database.db), channels, caps)
    sections = [section for parts in every for section in parts.prompt_sections]
    summaries = Summaries(model)
    late.push_async_callback(summaries.stop)  # after the pipeline, before usage closes
    agent = Agent(model, catalog, sections, media=media, summaries=summaries)
    core = Core(deps, agent)
    status_sections = (
        *(section for parts in every for section in parts.status),
        budget_section(deps),
        zone_section(deps),
    )
    board = StatusBoard(channels, outbox, status_sections)
    commands: dict[str, Command] = {}
    resolvers: dict[str, TierResolver] = {}
    # First: a button press, then "send 4711" releases what was held, nothing else
    # (before alert directives).
    interceptors: list[Interceptor] = [pressing(catalog), confirming(catalog)]
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
    # No cap here: the model's adaptive limit paces model calls.
    pipeline = Pipeline(
        database.db,
        dispatcher.handle,
        outbox,
        channels,
        clock,
        burst_rules={name: rule for parts in every for name, rule in parts.burst_rules.items()},
        intake=intake,
    )

    async def stop_pipeline() -> None:
        """Messages being handled get what the deadline leaves the parts after it;
        one cut off stays unfinished, and the next start handles it again."""
        await pipeline.stop(grace=shutdown.left(keep=AFTER_PIPELINE))

    handling.push_async_callback(stop_pipeline)
    for parts in every:
        if parts.start is not None:
            await parts.start(core)
    # Assembled: what listens to the owner's settings, jobs and pulse is fixed now.
    owner.listeners.freeze()
    if scheduling is not None:
        scheduling.jobs.listeners.freeze()
        scheduling.pulse.listeners.freeze()
    pipeline.start()  # what waits in the intake's queue first, in the order it came
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
        monitors=services.monitors,
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
