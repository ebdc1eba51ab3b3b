"""Pytest fixtures for the fake model APIs and the fake Telegram Bot API; import them into
a test module to use them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import FakeTelegram


@pytest.fixture
async def openai_api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def gemini_api() -> AsyncIterator[FakeGemini]:
    async with FakeGemini() as fake:
        yield fake


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    """The fake Telegram Bot API."""
    async with FakeTelegram() as server:
        yield server
