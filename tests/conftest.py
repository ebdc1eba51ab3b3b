"""Shared fixtures: a real SecantusDB server, a fresh database per test, no internet.

Any attempt to reach a non-loopback address fails at once with ``BlockedNetwork``
instead of hanging, so a test that would need the internet cannot pass.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from agent.config import Settings
from agent.context import AgentDeps
from storage.collections import ensure_indexes
from storage.embedded.owner import EmbeddedServer
from tests.contexts import agent_deps
from tests.offline import OfflineLoop, block_the_internet

pytest_plugins = ("tests.timeout_tasks",)  # pytest-timeout, with the asyncio tasks


def pytest_configure(config: pytest.Config) -> None:
    assert "openai" not in sys.modules, "conftest's imports must not load the OpenAI SDK"
    block_the_internet()
    for name in list(os.environ):
        # The developer's own keys and settings must never leak into a test.
        if name.split("_")[0] in {
            "GEMINI",
            "OPENAI",
            "TELEGRAM",
            "TWILIO",
            "BRAVE",
            "MONGODB",
            "OWNER",
            "LLM",
            "WHATSAPP",
            "ADMIN",
            "HTTP",
            "PUBLIC",
            "TIMEZONE",
            "DATA",
            "MCP",
        }:
            del os.environ[name]


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from secantus import SecantusDBServer

    server = SecantusDBServer(
        host="127.0.0.1",
        port=0,
        storage_path=str(tmp_path_factory.mktemp("secantus")),
        replica_set_name=None,  # a standalone node, as the embedded server runs
        # No TTL sweeper: it works on the wall clock, and would delete what a test
        # stored under its own clock (a held group's ``expires_at`` a day after a
        # fake "now" that is days ago). ``tests/storage/test_held_expiry.py`` runs one.
        ttl_sweep_seconds=0,
    )
    server.start()
    try:
        yield str(server.uri)
    finally:
        server.stop()


@pytest.fixture(scope="session")
async def mongo_client(mongo_server: str) -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_server,
        directConnection=True,
        retryWrites=False,
        tz_aware=True,
        serverSelectionTimeoutMS=5000,
    )
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def db(
    mongo_client: AsyncMongoClient[dict[str, Any]],
) -> AsyncIterator[AsyncDatabase[dict[str, Any]]]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    database = mongo_client[name]
    await ensure_indexes(database)
    try:
        yield database
    finally:
        await mongo_client.drop_database(name)


@pytest.fixture
async def private_embedded(tmp_path: Path) -> AsyncIterator[EmbeddedServer]:
    """An embedded server of the test's own in ``tmp_path``, for a test that freezes or
    kills it: ``open_database`` starts it, this stops it."""
    server = EmbeddedServer(tmp_path)
    try:
        yield server
    finally:
        await server.stop()


def make_settings(**overrides: Any) -> Settings:
    """Settings for a test: nothing from the environment or a ``.env`` file."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(data_dir=tmp_path / "data", openai_api_key="sk-test")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client for a test's services (tests reach only local fakes)."""
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def deps(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], http: aiohttp.ClientSession
) -> AgentDeps:
    return agent_deps(settings, db, http)


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Any:
    """Every async test runs on the loop ``watchkeeper`` runs on (``agent.cli.main.run``),
    with the internet blocked there too."""
    return {"uvloop": OfflineLoop}
