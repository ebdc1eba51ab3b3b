"""The embedded database in the agent's own process, the default: one process serves
it, a second command on the same ``DATA_DIR`` attaches to it, and a stop closes the store
so that the next owner (another process) opens it at once with everything committed."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from storage.embedded.owner import EmbeddedServer, EmbeddedUnavailable
from storage.embedded.spare import wanted
from tests.agent.cli.procs import children_of

ROOT = Path(__file__).resolve().parents[2]
READER = """
import asyncio, sys
from pathlib import Path
from pymongo import AsyncMongoClient
from storage.embedded.owner import EmbeddedServer

async def main():
    server = EmbeddedServer(Path(sys.argv[1]))
    uri = await server.start()
    client = AsyncMongoClient(uri, directConnection=True)
    note = await client.t.notes.find_one({"_id": 1})
    owned = server.owner
    await client.close()
    await server.stop()
    print(owned, note["text"], flush=True)

asyncio.run(main())
"""

KILLED_AFTER_WRITING = """
import asyncio, os, signal, sys
from pathlib import Path
from pymongo import AsyncMongoClient
from storage.embedded.owner import EmbeddedServer

async def main():
    server = EmbeddedServer(Path(sys.argv[1]))
    client = AsyncMongoClient(await server.start(), directConnection=True)
    for i in range(20):
        await client.t.sent.update_one({"_id": i}, {"$set": {"sent": True}}, upsert=True)
    os.kill(os.getpid(), signal.SIGKILL)  # at once: each write acknowledged, nothing more

asyncio.run(main())
"""

Doc = dict[str, object]


async def test_the_server_runs_in_this_process_and_a_second_start_attaches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    server = EmbeddedServer(data)
    server.launch()  # begun at once, beside whatever the caller loads next
    uri = await server.start()
    try:
        assert server.owner and server.pid is None
        assert children_of(os.getpid(), marker=str(data)) == []  # no process for it
        assert (data / "db.uri").read_text() == uri
        second = EmbeddedServer(data)
        assert await second.start() == uri and not second.owner
        await second.stop()
        client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, directConnection=True)
        try:
            await client.t.notes.insert_one({"_id": 1, "text": "pay rent"})
        finally:
            await client.close()
        assert await server.start() == uri  # started once: the address at once
    finally:
        await server.stop()
    assert not (data / "db.uri").exists()  # nobody attaches to a closed server
    # Closed from the thread that opened it: nothing for the owner's log to alarm about.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_stop_closes_the_store_for_the_next_owner_with_what_was_written(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = EmbeddedServer(data)
    uri = await server.start()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, directConnection=True)
    try:
        await client.t.notes.insert_one({"_id": 1, "text": "pay rent"})
    finally:
        await client.close()
    await server.stop()
    reader = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", READER, str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert reader.returncode == 0, reader.stderr
    assert reader.stdout.split() == ["True", "pay", "rent"]  # it owned the store itself


async def test_what_it_acknowledged_survives_a_kill_9_of_the_process(tmp_path: Path) -> None:
    """The server dies with the agent: a write it acknowledged is on disk already (each
    commit waits for the journal), so a record of a reply sent just before a crash is
    still there after it, and the reply is not sent twice."""
    data = tmp_path / "data"
    killed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", KILLED_AFTER_WRITING, str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    server = EmbeddedServer(data)
    uri = await server.start()  # at once: the store closed with the killed process
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, directConnection=True)
    try:
        assert await client.t.sent.count_documents({"sent": True}) == 20
    finally:
        await client.close()
        await server.stop()


async def test_a_store_it_cannot_open_is_one_clear_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "db").write_text("not a directory")  # WiredTiger cannot open a file as a store
    server = EmbeddedServer(data)
    with pytest.raises(EmbeddedUnavailable, match="did not start") as raised:
        await server.start()
    assert "\n" not in str(raised.value)
    assert not server.owner
    again = EmbeddedServer(data)  # the lock was let go: another try gets as far
    with pytest.raises(EmbeddedUnavailable):
        await again.start()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"EMBEDDED_DB_SEPARATE_PROCESS": "true"}, True),
        ({"EMBEDDED_DB_SEPARATE_PROCESS": " 1 "}, True),
        ({"embedded_db_separate_process": "Yes"}, True),  # any case, as the settings read it
        ({"EMBEDDED_DB_SEPARATE_PROCESS": "0"}, False),
        ({"EMBEDDED_DB_SEPARATE_PROCESS": "false"}, False),
    ],
)
def test_a_spare_process_is_started_only_when_the_environment_asks_for_one(
    environ: dict[str, str], expected: bool
) -> None:
    assert wanted(environ) is expected
