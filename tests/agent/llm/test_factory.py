"""``build_model``: which provider and fallback the settings choose."""

from __future__ import annotations

import pytest

from agent.config import ConfigError
from agent.llm.factory import NO_MODEL, build_model
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.llm.resilient import ResilientModel
from tests.conftest import make_settings

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
