"""Pytest fixtures for the fake model APIs, the fake Telegram Bot API, and a database whose
client records its commands (``watched``); import them into a test module to use them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from tests.fakes.commands import Commands
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import FakeTelegram

Doc = dict[str, Any]


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


@pytest.fixture
async def watched(
    mongo_server: str, db: AsyncDatabase[Doc]
) -> AsyncIterator[tuple[AsyncDatabase[Doc], Commands]]:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        mongo_server,
        directConnection=True,
        retryWrites=False,
        tz_aware=True,
        event_listeners=[commands],
    )
    try:
        yield client[db.name], commands
    finally:
        await client.close()
