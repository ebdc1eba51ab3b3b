"""Build the configured model: the chosen provider, wrapped with retries and a fallback."""

from __future__ import annotations

from agent.config import ConfigError, Provider, SdkMissing, Settings, install_command, installed
from agent.llm.base import ModelClient
from agent.llm.resilient import ResilientModel

NO_MODEL = "no model configured: set GEMINI_API_KEY or OPENAI_API_KEY"
LOCAL_KEY = "unused"
"""Key sent to an OpenAI-compatible server at ``OPENAI_BASE_URL`` that needs none
(Ollama, vLLM); the SDK refuses to start without one."""


def gemini_sdk_missing() -> str:
    """What to say when Gemini is chosen and its SDK (the ``gemini`` extra) is missing."""
    return (
        f"provider gemini needs Google's SDK, the gemini extra: {install_command('gemini')}"
        " (scripts/run installs it when GEMINI_API_KEY is set)"
    )


def build_model(settings: Settings) -> ModelClient:
    """The model every run uses; raises ``ConfigError`` with one line when unusable."""
    if settings.llm_provider is None:
        raise ConfigError(NO_MODEL)
    primary = build_provider(settings, settings.llm_provider)
    fallback = None
    if settings.llm_fallback is not None and settings.llm_fallback != settings.llm_provider:
        fallback = build_provider(settings, settings.llm_fallback)
    return ResilientModel(primary, fallback, max_concurrent=settings.max_concurrent_model_calls)


def check_model(settings: Settings) -> None:
    """The ``ConfigError`` ``build_model`` would raise, found without importing an SDK:
    ``watchkeeper run`` checks first, starts the database, and builds while it boots."""
    if settings.llm_provider is None:
        raise ConfigError(NO_MODEL)
    provider_key(settings, settings.llm_provider)
    if settings.llm_fallback is not None:
        provider_key(settings, settings.llm_fallback)


def provider_key(settings: Settings, provider: Provider) -> str:
    """The key ``provider`` is called with; ``ConfigError`` when it is missing, or when
    the provider's SDK is not installed (Gemini's is an extra), found without importing it."""
    if provider == "gemini":
        if settings.gemini_api_key is None or not settings.gemini_api_key.get_secret_value():
            raise ConfigError("provider gemini is selected but GEMINI_API_KEY is not set")
        if not installed("google.genai"):
            raise SdkMissing(gemini_sdk_missing(), "gemini")
        return settings.gemini_api_key.get_secret_value()
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    if not key:
        if not settings.openai_base_url:
            raise ConfigError("provider openai is selected but OPENAI_API_KEY is not set")
        key = LOCAL_KEY
    return key


def build_provider(settings: Settings, provider: Provider) -> ModelClient:
    """One bare adapter (no retries), e.g. for ``watchkeeper doctor`` to probe; each
    request may take ``LLM_TIMEOUT_SECONDS``."""
    key = provider_key(settings, provider)  # before the SDK's import: it is slow
    if provider == "gemini":
        from agent.llm.gemini import GeminiModel

        return GeminiModel(
            key,
            settings.gemini_model,
            base_url=settings.gemini_base_url or None,
            timeout=settings.llm_timeout_seconds,
            max_output_tokens=settings.max_output_tokens,
        )
    from agent.llm.openai.model import OpenAIModel

    return OpenAIModel(
        key,
        settings.openai_model,
        base_url=settings.openai_base_url or None,
        timeout=settings.llm_timeout_seconds,
        max_connections=settings.max_concurrent_model_calls,
        max_output_tokens=settings.max_output_tokens,
    )
