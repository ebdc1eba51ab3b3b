"""Shared by the provider adapter tests: keys, a tiny toolset, a recorded sleep, one run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agent.context import AgentDeps, RunContext
from agent.conversation.loop import LoopResult, run_loop
from agent.llm.base import ModelClient
from agent.llm.types import user_message
from agent.tools.base import Tool, Toolset
from tests.contexts import owner_ctx

OPENAI_KEY = "sk-test-openai-3f9a1c"
GEMINI_KEY = "AIza-test-gemini-77e2b0"
SYSTEM = "You are a test assistant."


# -- a tiny toolset ------------------------------------------------------------
class CityArgs(BaseModel):
    city: str


class NoArgs(BaseModel):
    pass


@dataclass
class Kit:
    tools: Toolset
    ran: list[str] = field(default_factory=list)


def make_kit() -> Kit:
    ran: list[str] = []

    async def weather(args: CityArgs, ctx: RunContext) -> dict[str, Any]:
        ran.append(f"weather:{args.city}")
        return {"city": args.city, "celsius": 21}

    async def numbers(args: NoArgs, ctx: RunContext) -> dict[str, Any]:
        ran.append("numbers")
        return {"data": [1, 2, 3]}

    tools = Toolset(
        [
            Tool("get_weather", "Current weather in a city.", CityArgs, weather, writes=False),
            Tool("list_numbers", "Some numbers.", NoArgs, numbers, writes=False),
        ]
    )
    return Kit(tools=tools, ran=ran)


@dataclass
class Sleeps:
    """An injected ``sleep`` that records the waits instead of waiting."""

    waits: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


async def run(
    model: ModelClient, kit: Kit, deps: AgentDeps, text: str = "Weather in Oslo?"
) -> LoopResult:
    return await run_loop(model, SYSTEM, [user_message(text)], kit.tools, owner_ctx(deps))
