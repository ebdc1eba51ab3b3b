"""Core overhead benchmark (issue 2). Prints its figures.

1. Loop + storage overhead per message with an instant in-process model, 1,000
   messages on the embedded database: p50/p99 ms and messages per second.
2. 200 conversations at once with a model that takes 1 s: total wall time
   (conversations run in parallel, each in order).
3. Input tokens of the "hi" request: system prompt plus every core tool schema.

Run: python bench/bench_core.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.app.core import build_app
from agent.config import Settings
from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.conversation.dispatch import Dispatcher, Trust
from agent.llm.types import ModelMessage, ModelResponse, TextPart, ToolSpec, Usage
from agent.tools.catalog import core_catalog
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.types import InboundMessage, OutboundMessage, SendResult
from runtime.loop import run as run_app_loop
from storage.db import open_database
from tests.contexts import agent_deps, owner_ctx
from tests.fakes.scripted import ScriptedModel
from tests.tokens import count_tokens


class InstantModel:
    name = "instant"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = ModelMessage(role="assistant", parts=[TextPart(text="ok")])
        return ModelResponse(message=reply, usage=Usage(input_tokens=1, output_tokens=1))

    async def aclose(self) -> None:
        return None


class NullChannel:
    name = "bench"

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}

    async def start(self, sink: object) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent[message.chat_id] = time.perf_counter()
        return SendResult()

    async def typing(self, chat_id: str) -> None:
        return None

    def status(self) -> dict[str, object]:
        return {}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def overhead(settings: Settings, deps: AgentDeps) -> None:
    agent = Agent(InstantModel(), core_catalog())
    timings = []
    for i in range(50):  # warm-up
        await agent.respond(f"warm {i}", owner_ctx(deps, conversation_key=f"w:{i % 10}"))
    start = time.perf_counter()
    for i in range(1000):
        ctx = owner_ctx(deps, conversation_key=f"bench:{i % 20}")
        t0 = time.perf_counter()
        await agent.respond(f"message {i}", ctx)
        timings.append((time.perf_counter() - t0) * 1000)
    total = time.perf_counter() - start
    print(
        f"loop+storage overhead, 1000 messages: p50 {statistics.median(timings):.2f} ms, "
        f"p99 {pct(timings, 0.99):.2f} ms, {1000 / total:.0f} messages/s "
        "(targets p50 <= 5 ms, p99 <= 25 ms)"
    )


async def parallel(settings: Settings, deps: AgentDeps) -> None:
    agent = Agent(InstantModel(delay=1.0), core_catalog())
    dispatcher = Dispatcher(deps=deps, agent=agent, resolvers={"bench": _owner})
    channel = NullChannel()
    channels = {"bench": channel}
    outbox = Outbox(deps.db, channels, lambda: datetime.now(UTC))
    pipeline = Pipeline(
        deps.db,
        dispatcher.handle,
        outbox,
        channels,
        lambda: datetime.now(UTC),
        max_concurrency=256,
    )
    start = time.perf_counter()
    for i in range(200):
        await pipeline.submit(
            InboundMessage(
                channel="bench",
                external_id=f"p{i}",
                chat_id=f"c{i}",
                sender_id="o",
                text="hello",
                received_at=datetime.now(UTC),
            )
        )
    submitted = time.perf_counter() - start
    await pipeline.join()
    wall = time.perf_counter() - start
    print(
        f"200 conversations at once, 1 s model: {wall:.2f} s wall, "
        f"{len(channel.sent)} replies, all stored after {submitted:.2f} s (target <= 2 s)"
    )


async def _owner(_msg: InboundMessage) -> Trust:
    return Trust("owner")


async def hi_tokens(settings: Settings) -> None:
    """The request a plain "hi" from the owner sends, with the whole app's tools."""
    model = ScriptedModel(lambda r: "hello")
    async with build_app(settings, model=model, channels=[], on_part=lambda _: None) as app:
        await app.agent.respond("hi", owner_ctx(app.deps))
    request = model.requests[0]
    schemas = json.dumps([t.model_dump() for t in request.tools])
    system = count_tokens(request.system)
    total = system + count_tokens(schemas) + count_tokens("hi")
    print(
        f'"hi" request: {total} input tokens (system {system}, {len(request.tools)} tool '
        f"schemas {count_tokens(schemas)}: {', '.join(request.tool_names)}) (target < 2500)"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await hi_tokens(
            Settings(  # type: ignore[call-arg]
                _env_file=None, data_dir=Path(tmp) / "hi", openai_api_key="x", brave_api_key="b"
            )
        )
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, data_dir=Path(tmp), openai_api_key="x", brave_api_key="b"
        )
        async with (
            open_database(None, "bench", Path(tmp)) as database,
            aiohttp.ClientSession() as http,
        ):
            deps = agent_deps(settings, database.db, http)
            await overhead(settings, deps)
            await parallel(settings, deps)


if __name__ == "__main__":
    run_app_loop(main())
