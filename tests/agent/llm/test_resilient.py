"""The resilient model: retries, fallback to the other provider, timeouts, and keys
kept out of errors and logs, through the real SDKs against local fakes."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from agent.context import AgentDeps
from agent.llm.base import ModelClient, ModelError
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.llm.resilient import MODEL_BACKOFF, ResilientModel
from agent.llm.types import user_message
from tests.agent.llm.llm_kit import GEMINI_KEY, OPENAI_KEY, SYSTEM, Sleeps, make_kit, run
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest


# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


# -- retries and fallback --------------------------------------------------------
async def test_503_retries_then_falls_back_to_gemini(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    no_sleep = Sleeps()
    openai_api.reply_error(503, "overloaded", type_="server_error", always=True)
    gemini_api.reply_text("Hello from Gemini.")
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        sleep=no_sleep,
        draw=lambda: 1.0,
    )
    result = await run(model, make_kit(), deps, "hi")
    await model.aclose()
    assert result.text == "Hello from Gemini."
    assert len(openai_api.requests) == 4  # first try + 3 retries
    assert len(gemini_api.requests) == 1
    assert no_sleep.waits == [0.5, 1.0, 2.0]


async def test_429_then_success_stays_on_primary(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    no_sleep = Sleeps()
    openai_api.reply_error(429, "Rate limit reached", type_="requests", code="rate_limit_exceeded")
    openai_api.reply_text("Hello again.")
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        sleep=no_sleep,
    )
    result = await run(model, make_kit(), deps, "hi")
    await model.aclose()
    assert result.text == "Hello again."
    assert len(openai_api.requests) == 2 and len(gemini_api.requests) == 0
    assert len(no_sleep.waits) == 1 and 0.25 <= no_sleep.waits[0] <= 0.5


async def test_non_retryable_error_skips_retries_but_falls_back(
    openai_api: FakeOpenAI, gemini_api: FakeGemini
) -> None:
    no_sleep = Sleeps()
    gemini_api.reply_error(403, "permission denied", always=True)
    openai_api.reply_error(401, "bad key", type_="invalid_request_error", always=True)
    model = ResilientModel(
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        sleep=no_sleep,
    )
    with pytest.raises(ModelError) as info:
        await model.request(SYSTEM, [user_message("hi")], [])
    await model.aclose()
    assert info.value.status == 401 and not info.value.retryable
    assert len(gemini_api.requests) == 1 and len(openai_api.requests) == 1
    assert no_sleep.waits == []


async def test_timeouts_are_retryable(openai_api: FakeOpenAI, gemini_api: FakeGemini) -> None:
    openai_api.hang(2.0)
    gemini_api.hang(2.0)
    models: list[ModelClient] = [
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url, timeout=0.2),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url, timeout=0.2),
    ]
    for model in models:
        with pytest.raises(ModelError) as info:
            await model.request(SYSTEM, [user_message("hi")], [])
        assert info.value.retryable, model.name
        await model.aclose()


async def test_api_key_never_logged(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    openai_api.reply_error(401, f"Incorrect API key provided: {OPENAI_KEY}", always=True)
    gemini_api.reply_error(400, f"API key not valid: {GEMINI_KEY}", always=True)
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-test", base_url=gemini_api.base_url),
        sleep=Sleeps(),
    )
    with pytest.raises(ModelError) as info:
        await model.request(SYSTEM, [user_message("hi")], [])
    await model.aclose()
    assert OPENAI_KEY not in str(info.value) and GEMINI_KEY not in str(info.value)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("openai" in r.getMessage() and "401" in r.getMessage() for r in warnings)
    assert any("gemini" in r.getMessage() and "400" in r.getMessage() for r in warnings)
    assert OPENAI_KEY not in caplog.text and GEMINI_KEY not in caplog.text


async def test_fallback_mid_exchange_signs_foreign_calls_for_gemini(
    openai_api: FakeOpenAI, gemini_api: FakeGemini, deps: AgentDeps
) -> None:
    """OpenAI calls a tool, then fails; Gemini 3 continues from OpenAI's unsigned call."""
    openai_api.reply_tool_calls(("get_weather", {"city": "Oslo"}))
    openai_api.reply_error(503, "overloaded", type_="server_error", always=True)
    gemini_api.reply_text("21 in Oslo.")
    model = ResilientModel(
        OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url),
        GeminiModel(GEMINI_KEY, "gemini-3-flash", base_url=gemini_api.base_url),
        backoff=replace(MODEL_BACKOFF, retries=0),
        sleep=Sleeps(),
    )
    kit = make_kit()
    result = await run(model, kit, deps)
    await model.aclose()
    assert result.text == "21 in Oslo." and kit.ran == ["weather:Oslo"]
    call_part = gemini_api.bodies[0]["contents"][1]["parts"][0]
    assert call_part["functionCall"] == {"name": "get_weather", "args": {"city": "Oslo"}}
    assert call_part["thoughtSignature"] == "skip_thought_signature_validator"
    assert gemini_api.function_responses(0)[0]["response"] == {"city": "Oslo", "celsius": 21}
