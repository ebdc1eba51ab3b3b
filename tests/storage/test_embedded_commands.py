"""The owner's embedded server answers as a production mongod does: without its
test-only commands, which would let any local process make the database fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from storage.embedded.owner import EmbeddedServer

FAIL_ON_PING = {"configureFailPoint": "failCommand", "mode": "alwaysOn",
                "data": {"failCommands": ["ping"], "errorCode": 2}}  # fmt: skip


async def test_the_owners_server_has_no_fail_points(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "data")
    uri = await server.start()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, directConnection=True)
    try:
        with pytest.raises(OperationFailure, match=r"no such command|CommandNotFound"):
            await client.admin.command(FAIL_ON_PING)
        assert (await client.admin.command("ping"))["ok"] == 1  # nothing was armed
    finally:
        await client.close()
        await server.stop()


async def test_the_tests_server_can_fail_on_cue(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "data", test_commands=True)
    uri = await server.start()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, directConnection=True)
    try:
        await client.admin.command({**FAIL_ON_PING, "mode": {"times": 1}})
        with pytest.raises(OperationFailure):
            await client.admin.command("ping")
        assert (await client.admin.command("ping"))["ok"] == 1
    finally:
        await client.close()
        await server.stop()
