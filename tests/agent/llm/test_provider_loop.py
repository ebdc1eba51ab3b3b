"""Behaviour both provider adapters share, through the real SDKs against local fakes.

Every test drives the adapters the way the agent does (``run_loop`` with a small
toolset) and then reads what reached the fake, so the wire shapes are checked
as well as the behaviour.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agent.context import AgentDeps
from agent.llm.base import ModelClient
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from tests.agent.llm.llm_kit import GEMINI_KEY, OPENAI_KEY, make_kit, run
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest


# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


# -- one harness per provider, so behaviour tests run on both ----------------
@dataclass
class Harness:
    model: ModelClient
    calls: Callable[..., None]
    text: Callable[[str], None]
    results: Callable[[int], list[dict[str, Any]]]
    fake: FakeOpenAI | FakeGemini


def openai_harness(fake: FakeOpenAI) -> Harness:
    return Harness(
        model=OpenAIModel(OPENAI_KEY, "gpt-test", base_url=fake.base_url),
        calls=fake.reply_tool_calls,
        text=fake.reply_text,
        results=lambda i: [r for _, r in fake.tool_results(i)],
        fake=fake,
    )


def gemini_harness(fake: FakeGemini) -> Harness:
    return Harness(
        model=GeminiModel(GEMINI_KEY, "gemini-test", base_url=fake.base_url),
        calls=fake.reply_calls,
        text=lambda t: fake.reply_text(t),
        results=lambda i: [r["response"] for r in fake.function_responses(i)],
        fake=fake,
    )


@pytest.fixture(params=["openai", "gemini"])
async def harness(
    request: pytest.FixtureRequest, openai_api: FakeOpenAI, gemini_api: FakeGemini
) -> AsyncIterator[Harness]:
    h = openai_harness(openai_api) if request.param == "openai" else gemini_harness(gemini_api)
    yield h
    await h.model.aclose()


# -- round trips ---------------------------------------------------------------
async def test_tool_round_trip_both_providers(harness: Harness, deps: AgentDeps) -> None:
    kit = make_kit()
    harness.calls(("get_weather", {"city": "Oslo"}))
    harness.text("It is 21 °C in Oslo.")
    result = await run(harness.model, kit, deps)
    assert result.text == "It is 21 °C in Oslo."
    assert kit.ran == ["weather:Oslo"]
    assert result.turns == 2 and not result.exhausted
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert len(harness.fake.requests) == 2
    assert harness.results(1) == [{"city": "Oslo", "celsius": 21}]


async def test_two_tool_calls_in_one_turn(harness: Harness, deps: AgentDeps) -> None:
    kit = make_kit()
    harness.calls(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}))
    harness.text("Oslo 21, Rome 21.")
    result = await run(harness.model, kit, deps)
    assert result.text == "Oslo 21, Rome 21."
    assert kit.ran == ["weather:Oslo", "weather:Rome"]
    assert [c.name for c in result.messages[0].tool_calls] == ["get_weather", "get_weather"]
    assert len({c.id for c in result.messages[0].tool_calls}) == 2
    assert harness.results(1) == [
        {"city": "Oslo", "celsius": 21},
        {"city": "Rome", "celsius": 21},
    ]


async def test_duplicate_call_runs_once(harness: Harness, deps: AgentDeps) -> None:
    kit = make_kit()
    harness.calls(("get_weather", {"city": "Oslo"}))
    harness.calls(("get_weather", {"city": "Oslo"}))
    harness.text("21 in Oslo.")
    result = await run(harness.model, kit, deps)
    assert result.text == "21 in Oslo."
    assert kit.ran == ["weather:Oslo"]
    second_result = harness.results(2)[-1]
    assert "duplicate call" in second_result["error"]
    assert "earlier result" in second_result["error"]


# -- turn cap ----------------------------------------------------------------------
async def test_turn_cap_gives_honest_reply(openai_api: FakeOpenAI, deps: AgentDeps) -> None:
    kit = make_kit()
    for n in range(20):
        openai_api.reply_tool_calls(("get_weather", {"city": f"City{n}"}))
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    result = await run(model, kit, deps)
    await model.aclose()
    assert len(openai_api.requests) == 8
    assert len(kit.ran) == 8
    assert result.exhausted and result.turns == 8
    assert "ran out of steps" in result.text
