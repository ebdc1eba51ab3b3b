"""Shared fixtures: a real SecantusDB server, a fresh database per test, no internet.

Any attempt to reach a non-loopback address fails at once with ``BlockedNetwork``
instead of hanging, so a test that would need the internet cannot pass.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from agent.cli.deferred import OPENAI_TYPES, defer_package_inits
from agent.config import Settings
from agent.context import AgentDeps
from storage.embedded_catalog import read_catalogue_once_per_write
from storage.indexes import ensure_indexes

pytest_plugins = ("tests.timeouts",)  # per-test timeouts that dump every stack


class BlockedNetwork(RuntimeError):
    pass


def _is_local(host: object) -> bool:
    if not isinstance(host, str):
        return True  # AF_UNIX paths and the like
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if isinstance(address, tuple) and not _is_local(address[0]):
        raise BlockedNetwork(f"test tried to reach {address[0]}: tests must stay offline")
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> Any:
    if isinstance(address, tuple) and not _is_local(address[0]):
        raise BlockedNetwork(f"test tried to reach {address[0]}: tests must stay offline")
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if name is not None and not _is_local(name):
        raise BlockedNetwork(f"test tried to resolve {name}: tests must stay offline")
    return _real_getaddrinfo(host, *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    assert "openai" not in sys.modules, "conftest's imports must not load the OpenAI SDK"
    defer_package_inits(OPENAI_TYPES)  # as `watchkeeper` does: the SDK as the app runs it
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo
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

    read_catalogue_once_per_write()  # as the embedded server runs (storage.embedded_catalog)

    server = SecantusDBServer(
        host="127.0.0.1", port=0, storage_path=str(tmp_path_factory.mktemp("secantus"))
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


def make_settings(**overrides: Any) -> Settings:
    """Settings for a test: nothing from the environment or a ``.env`` file."""
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(data_dir=tmp_path / "data", openai_api_key="sk-test")


@pytest.fixture
def deps(settings: Settings, db: AsyncDatabase[dict[str, Any]]) -> AgentDeps:
    return AgentDeps(settings=settings, db=db)
