"""Shared pieces for the scheduler tests: an app with the scheduling feature on the session
database, timers off (tests move a ``FakeClock``), sending to a ``RecordingChannel``."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.app.core import App, Feature, build_app
from agent.app.features.scheduling import Scheduling, SchedulingOptions, scheduling
from agent.context import RunContext
from agent.llm.types import ModelMessage, ToolCallPart, ToolResultPart
from channels.types import Channel, InboundMessage
from tests.conftest import make_settings
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel


def parts_of(app: App) -> Scheduling:
    parts = app.scheduling
    assert isinstance(parts, Scheduling)
    return parts


@contextlib.asynccontextmanager
async def scheduled_app(
    app_db: AppDb,
    tmp_path: Path,
    model: ScriptedModel,
    clock: FakeClock,
    *,
    channels: list[Channel] | None = None,
    options: SchedulingOptions | None = None,
    pulse: bool = False,
    before: Sequence[Feature] = (),
    **settings: Any,
) -> AsyncIterator[App]:
    """``pulse=False`` (the default) switches the pulse off so cron tests see only cron.
    ``before``: features started before the scheduler (a stand-in alert router)."""
    config = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"sched_{uuid.uuid4().hex[:10]}",
        # The embedded server's, where ``watchkeeper schedule`` beside the app finds it.
        data_dir=app_db.data_dir or tmp_path,
        **settings,
    )
    chosen = options or SchedulingOptions(timer=False)
    async with build_app(
        config,
        embedded=app_db.server,
        model=model,
        channels=channels if channels is not None else [RecordingChannel()],
        clock=clock,
        features=[*before, scheduling(chosen)],
    ) as app:
        if not pulse:
            await parts_of(app).pulse.update_config(enabled=False)
        try:
            yield app
        finally:
            await app.database.client.drop_database(config.mongodb_db)


async def call_tool(app: App, tool: str, ctx: RunContext | None = None, /, **args: Any) -> Any:
    """Call a tool the way the loop does (validation included) in an owner chat."""
    context = ctx or owner_ctx(app.deps)
    return await app.catalog.for_context(context).call(tool, args, context)


def tool_call(tool: str, /, **arguments: Any) -> ModelMessage:
    """An assistant turn calling ``tool`` (its arguments may include ``name``)."""
    part = ToolCallPart(id=f"call_{uuid.uuid4().hex[:8]}", name=tool, arguments=arguments)
    return ModelMessage(role="assistant", parts=[part])


def tool_results(model: ScriptedModel) -> list[dict[str, Any]]:
    """Every tool result the model was shown, in order."""
    seen: list[dict[str, Any]] = []
    for request in model.requests:
        for message in request.messages:
            for part in message.parts:
                if isinstance(part, ToolResultPart) and part.result not in seen:
                    seen.append(part.result)
    return seen


def inbound(
    text: str,
    chat_id: str = "owner",
    channel: str = "console",
    received_at: datetime | None = None,
) -> InboundMessage:
    return InboundMessage(
        channel=channel,
        external_id=uuid.uuid4().hex,
        chat_id=chat_id,
        sender_id=chat_id,
        text=text,
        received_at=received_at or datetime.now(UTC),
    )
