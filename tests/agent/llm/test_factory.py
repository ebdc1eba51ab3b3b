"""``build_model``: which provider and fallback the settings choose."""

from __future__ import annotations

import pytest

from agent.config import ConfigError
from agent.llm.base import ModelClient, ModelError
from agent.llm.factory import NO_MODEL, build_model, build_provider
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.llm.resilient import ResilientModel
from agent.llm.types import user_message
from tests.conftest import make_settings
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest

# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")


async def test_build_model_requires_a_key() -> None:
    with pytest.raises(ConfigError, match=NO_MODEL):
        build_model(make_settings())
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        build_model(make_settings(llm_provider="openai", gemini_api_key="g"))
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        build_model(make_settings(openai_api_key="o", llm_fallback="gemini"))


async def test_build_model_picks_provider_and_fallback() -> None:
    only_gemini = build_model(make_settings(gemini_api_key="g"))
    assert isinstance(only_gemini, ResilientModel)
    assert isinstance(only_gemini.primary, GeminiModel) and only_gemini.fallback is None
    await only_gemini.aclose()

    both = build_model(
        make_settings(
            gemini_api_key="g", openai_api_key="o", llm_provider="openai", llm_fallback="gemini"
        )
    )
    assert isinstance(both, ResilientModel) and both.name == "openai"
    assert isinstance(both.primary, OpenAIModel) and isinstance(both.fallback, GeminiModel)
    await both.aclose()

    local = build_model(
        make_settings(llm_provider="openai", openai_base_url="http://127.0.0.1:1/v1")
    )
    assert isinstance(local, ResilientModel) and isinstance(local.primary, OpenAIModel)
    await local.aclose()


@pytest.mark.parametrize("provider", ["openai", "gemini"])
async def test_the_request_time_limit_is_llm_timeout_seconds(
    provider: str, openai_api: FakeOpenAI, gemini_api: FakeGemini
) -> None:
    """``LLM_TIMEOUT_SECONDS`` bounds one request of either adapter (not a fixed 60 s):
    an answer slower than it is a retryable "timed out", one within it arrives."""
    fake: FakeOpenAI | FakeGemini = openai_api if provider == "openai" else gemini_api
    urls = {"openai_base_url": openai_api.base_url, "gemini_base_url": gemini_api.base_url}
    keys = {"openai_api_key": "o", "gemini_api_key": "g"}

    def adapter(seconds: float) -> ModelClient:
        settings = make_settings(**keys, **urls, llm_timeout_seconds=seconds)
        return build_provider(settings, "openai" if provider == "openai" else "gemini")

    hasty = adapter(0.3)
    fake.hang(3.0)
    with pytest.raises(ModelError, match="timed out") as caught:
        await hasty.request("", [user_message("hi")], [])
    assert caught.value.retryable
    await hasty.aclose()

    patient = adapter(30.0)
    fake.push(Answer(200, fake.empty_answer(), delay=0.5))
    answer = await patient.request("", [user_message("hi")], [])
    assert answer.message.role == "assistant"
    await patient.aclose()
