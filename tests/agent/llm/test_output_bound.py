"""Every request bounds the answer's tokens (``MAX_OUTPUT_TOKENS``), so a model call's
cost is known before it is made and the daily budget can reserve it (issue 36, item 7)."""

from __future__ import annotations

import pytest

from agent.context import AgentDeps
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.llm.types import MAX_OUTPUT_TOKENS
from tests.agent.llm.llm_kit import GEMINI_KEY, OPENAI_KEY, make_kit, run
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


async def test_a_compatible_server_gets_max_tokens(openai_api: FakeOpenAI, deps: AgentDeps) -> None:
    openai_api.reply_text("hi")
    model = OpenAIModel(OPENAI_KEY, "local-model", base_url=openai_api.base_url)
    try:
        await run(model, make_kit(), deps)
    finally:
        await model.aclose()
    [body] = openai_api.bodies
    assert body["max_tokens"] == MAX_OUTPUT_TOKENS and "max_completion_tokens" not in body


async def test_a_server_that_wants_the_other_field_gets_it_from_then_on(
    openai_api: FakeOpenAI, deps: AgentDeps
) -> None:
    openai_api.reply_error(
        400,
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        code="unsupported_parameter",
    )
    openai_api.reply_text("first")
    openai_api.reply_text("second")
    model = OpenAIModel(OPENAI_KEY, "o4-mini", base_url=openai_api.base_url, max_output_tokens=900)
    try:
        assert (await run(model, make_kit(), deps)).text == "first"
        assert (await run(model, make_kit(), deps)).text == "second"
    finally:
        await model.aclose()
    refused, *rest = openai_api.bodies
    assert refused["max_tokens"] == 900
    assert [(b.get("max_completion_tokens"), "max_tokens" in b) for b in rest] == [
        (900, False),
        (900, False),
    ]


async def test_gemini_asks_for_max_output_tokens(gemini_api: FakeGemini, deps: AgentDeps) -> None:
    gemini_api.reply_text("hi")
    model = GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url)
    try:
        await run(model, make_kit(), deps)
    finally:
        await model.aclose()
    [body] = gemini_api.bodies
    assert body["generationConfig"]["maxOutputTokens"] == MAX_OUTPUT_TOKENS
