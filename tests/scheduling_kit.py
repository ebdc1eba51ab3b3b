"""Shared pieces for the scheduler tests: a settable clock, a recording channel, and an
app with the scheduling feature on the session database, timers off (tests move time)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent.app.core import App, build_app
from agent.app.scheduling_feature import Scheduling, SchedulingOptions, scheduling
from agent.context import RunContext
from agent.llm.types import ModelMessage, ToolCallPart, ToolResultPart
from channels.types import Channel, InboundMessage, InboundSink, OutboundMessage, SendResult
from tests.conftest import make_settings
from tests.fakes.scripted import ScriptedModel


@dataclass
class FakeClock:
    """Time that moves only when a test says so."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def set(self, moment: datetime) -> datetime:
        self.now = moment.astimezone(UTC)
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@dataclass
class RecordingChannel:
    """A channel that keeps what it was asked to send."""

    name: str = "console"
    sent: list[OutboundMessage] = field(default_factory=list)

    async def start(self, sink: InboundSink) -> None:
        self.sink = sink

    async def stop(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent.append(message)
        return SendResult(external_ids=(f"m{len(self.sent)}",))

    async def typing(self, chat_id: str) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"connected": True}

    def texts(self, chat_id: str | None = None) -> list[str]:
        return [m.text for m in self.sent if chat_id is None or m.chat_id == chat_id]


def parts_of(app: App) -> Scheduling:
    parts = app.deps.services["scheduling"]
    assert isinstance(parts, Scheduling)
    return parts


@contextlib.asynccontextmanager
async def scheduled_app(
    mongo_server: str,
    tmp_path: Path,
    model: ScriptedModel,
    clock: FakeClock,
    *,
    channels: list[Channel] | None = None,
    options: SchedulingOptions | None = None,
    pulse: bool = False,
    **settings: Any,
) -> AsyncIterator[App]:
    """``pulse=False`` (the default) switches the pulse off so cron tests see only cron."""
    config = make_settings(
        mongodb_uri=mongo_server + "?directConnection=true",
        mongodb_db=f"sched_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        **settings,
    )
    chosen = options or SchedulingOptions(timer=False)
    async with build_app(
        config,
        model=model,
        channels=channels if channels is not None else [RecordingChannel()],
        clock=clock,
        features=[scheduling(chosen)],
    ) as app:
        if not pulse:
            await parts_of(app).pulse.update_config(enabled=False)
        try:
            yield app
        finally:
            await app.database.client.drop_database(config.mongodb_db)


async def call_tool(app: App, tool: str, ctx: RunContext | None = None, /, **args: Any) -> Any:
    """Call a tool the way the loop does (validation included) in an owner chat."""
    context = ctx or RunContext(deps=app.deps)
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
