"""Shared fixtures: the database as production runs it (``tests.databases``), a fresh
database per test, no internet.

Any attempt to reach a non-loopback address fails at once with ``BlockedNetwork``
instead of hanging, so a test that would need the internet cannot pass.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
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
from tests.databases import AppDb, start_embedded, start_external
from tests.fakes.clock import FakeClock
from tests.offline import OfflineLoop, block_the_internet

pytest_plugins = ("tests.timeout_tasks",)  # pytest-timeout, with the asyncio tasks


def pytest_configure(config: pytest.Config) -> None:
    assert "openai" not in sys.modules, "conftest's imports must not load the OpenAI SDK"
    config.addinivalue_line(
        "markers",
        "clock(moment): the ``clock`` fixture starts at this aware datetime ('now': the real time)",
    )
    config.addinivalue_line(
        "markers",
        "every_database: runs against the embedded server in a process of its own, on a "
        "thread of the app's process (scripts/run's default), and against an external "
        "MongoDB named by MONGODB_URI (tests.databases)",
    )
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
    os.environ.pop("WATCHKEEPER_CLI", None)  # a container's hint: each test sets its own


@pytest.fixture(scope="session")
async def embedded_database(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[AppDb]:
    """The embedded server as ``scripts/run`` starts it, one for the session, in a process
    of its own (``tests.databases`` says why)."""
    async with start_embedded(tmp_path_factory.mktemp("embedded"), separate=True) as database:
        yield database


@pytest.fixture(scope="session")
async def in_process_database(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[AppDb]:
    """The embedded server on a thread of this process, as ``scripts/run`` starts it by
    default; started only if a test runs in that mode."""
    async with start_embedded(tmp_path_factory.mktemp("in_process")) as database:
        yield database


@pytest.fixture(scope="session")
async def external_database(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[AppDb]:
    """A MongoDB named by ``MONGODB_URI``; started only if a test runs in that mode."""
    async with start_external(tmp_path_factory.mktemp("external")) as database:
        yield database


@pytest.fixture
def app_db(request: pytest.FixtureRequest) -> AppDb:
    """The database a test's app uses: the embedded server, or, for a test marked
    ``every_database``, each way of running one in turn (``pytest_generate_tests``)."""
    where: str = getattr(request, "param", "embedded")
    database: AppDb = request.getfixturevalue(f"{where}_database")
    return database


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("every_database") is None:
        return
    if "app_db" not in metafunc.fixturenames:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: every_database needs app_db")
    metafunc.parametrize("app_db", ["embedded", "in_process", "external"], indirect=True)


@pytest.fixture
def mongo_server(app_db: AppDb) -> str:
    """The URI a test's own clients use to reach its app's database server."""
    return app_db.uri


@pytest.fixture
def mongo_client(app_db: AppDb) -> AsyncMongoClient[dict[str, Any]]:
    return app_db.client


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
    kills it: in a process of its own (``EMBEDDED_DB_SEPARATE_PROCESS``), as only there
    can it stop answering while the agent goes on; ``open_database`` starts it, this
    stops it."""
    server = EmbeddedServer(tmp_path, separate_process=True)
    try:
        yield server
    finally:
        await server.stop()


def make_settings(**overrides: Any) -> Settings:
    """Settings for a test: nothing from the environment or a ``.env`` file."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FakeClock:
    """The one fake clock fixture: it starts where the test's (or its module's)
    ``@pytest.mark.clock(moment)`` says, so no test depends on when it runs."""
    marker = request.node.get_closest_marker("clock")
    if marker is None or len(marker.args) != 1:
        raise pytest.UsageError(
            f"{request.node.nodeid}: the clock fixture needs @pytest.mark.clock(moment)"
        )
    (moment,) = marker.args
    return FakeClock(datetime.now(UTC) if moment == "now" else moment)


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
    """Every async test runs on the loop ``watchkeeper`` runs on (``runtime.loop.run``),
    with the internet blocked there too."""
    return {"uvloop": OfflineLoop}
