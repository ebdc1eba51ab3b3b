"""The OpenAI adapter on the SDK's aiohttp transport (``agent.llm.openai.model``):
rate limits with Retry-After, a refused connection, a server that hangs, a burst wider
than aiohttp's default pool, and a close that leaves nothing open."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

import pytest

from agent.llm.base import ModelError
from agent.llm.openai.model import OpenAIModel
from agent.llm.types import user_message
from tests.agent.llm.llm_kit import OPENAI_KEY, SYSTEM
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer

__all__ = ["openai_api"]  # a fixture, imported for pytest


async def _error(model: OpenAIModel) -> ModelError:
    try:
        await model.request(SYSTEM, [user_message("hi")], [])
    except ModelError as exc:
        return exc
    raise AssertionError("the request succeeded")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_429_is_retryable_and_carries_its_retry_after(openai_api: FakeOpenAI) -> None:
    openai_api.rate_limit(1, retry_after="7")
    openai_api.reply_text("Hello after the wait.")
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    try:
        error = await _error(model)
        answer = await model.request(SYSTEM, [user_message("hi")], [])
    finally:
        await model.aclose()
    assert error.status == 429 and error.retryable and error.retry_after == 7.0
    assert "openai HTTP 429" in str(error) and "Rate limit reached" in str(error)
    assert answer.message.text == "Hello after the wait."
    assert openai_api.requests[0].headers["Authorization"] == f"Bearer {OPENAI_KEY}"


async def test_a_refused_connection_says_so_at_once() -> None:
    port = _closed_port()
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=f"http://127.0.0.1:{port}/v1")
    try:
        async with asyncio.timeout(30):  # watchdog: refused, not waited for
            error = await _error(model)
    finally:
        await model.aclose()
    assert error.retryable and error.status is None
    assert str(error).startswith("openai: connection failed: ")
    assert f"127.0.0.1:{port}" in str(error) and "timed out" not in str(error)


async def test_a_hung_server_times_out_after_the_request_timeout(openai_api: FakeOpenAI) -> None:
    openai_api.hang(5.0)
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url, timeout=0.3)
    try:
        async with asyncio.timeout(30):  # watchdog; the server would answer after 5 s
            error = await _error(model)
    finally:
        await model.aclose()
    # Only the 0.3 s request timeout can fail it: the server does answer, later.
    assert str(error) == "openai: request timed out" and error.retryable


async def test_more_calls_at_once_than_aiohttps_default_pool(openai_api: FakeOpenAI) -> None:
    """aiohttp's own connector caps at 100 connections; the model's limiter allows more."""
    openai_api.default = Answer(200, openai_api.completion("hello"), delay=3.0)
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    try:
        answers = await asyncio.gather(
            *(model.request(SYSTEM, [user_message(f"hi {i}")], []) for i in range(150))
        )
    finally:
        await model.aclose()
    assert [a.message.text for a in answers] == ["hello"] * 150
    assert openai_api.peak == 150


async def test_closing_the_model_leaves_no_session_open(openai_api: FakeOpenAI) -> None:
    with warnings.catch_warnings():  # what earlier tests left behind is not ours to judge
        warnings.simplefilter("ignore")
        gc.collect()
    openai_api.reply_text("Hello.")
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url=openai_api.base_url)
    await model.request(SYSTEM, [user_message("hi")], [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await model.aclose()
        del model
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_a_proxy_in_the_environment_carries_the_requests(
    openai_api: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP_PROXY`` is honoured: the fake here is the proxy, for a host that does not exist."""
    monkeypatch.setenv("HTTP_PROXY", openai_api.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    openai_api.reply_text("through the proxy")
    model = OpenAIModel(OPENAI_KEY, "gpt-test", base_url="http://openai.invalid/v1")
    try:
        async with asyncio.timeout(30):  # watchdog
            answer = await model.request(SYSTEM, [user_message("hi")], [])
    finally:
        await model.aclose()
    assert answer.message.text == "through the proxy"
    assert openai_api.requests[0].headers["Host"] == "openai.invalid"
