"""A database process started before the settings are known: handed its store, or let go."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pymongo import AsyncMongoClient

from storage.embedded.owner import EmbeddedServer
from storage.embedded.spare import SpareServer
from tests.agent.cli.procs import wait_gone

ROOT = Path(__file__).resolve().parents[2]


def _spare() -> SpareServer:
    spare = SpareServer.start()
    assert spare is not None
    return spare


async def _round_trip(uri: str) -> object:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, directConnection=True)
    try:
        await client.w.notes.insert_one({"_id": 1, "text": "renew passport"})
        found = await client.w.notes.find_one({"_id": 1})
        return None if found is None else found["text"]
    finally:
        await client.close()


async def test_a_spare_handed_the_store_serves_it_and_logs_there(tmp_path: Path) -> None:
    spare = _spare()
    pid = spare.pid
    server = EmbeddedServer(tmp_path / "data", separate_process=True)
    server.launch(spare)
    assert server.pid == pid  # the spare itself, not a new process
    try:
        uri = await server.start()
        assert await _round_trip(uri) == "renew passport"
    finally:
        await server.stop()
    log = await asyncio.to_thread((tmp_path / "data" / "db.log").read_text)
    assert "stopped in" in log  # its output went to the store's log once assigned


async def test_a_spare_not_needed_exits_by_itself() -> None:
    spare = _spare()
    pid = spare.pid
    assert pid is not None
    spare.dismiss()
    took = await asyncio.to_thread(wait_gone, pid, 10.0)
    assert took is not None, "a dismissed spare was still running after 10 s"


async def test_a_dead_spare_is_replaced_by_a_new_process(tmp_path: Path) -> None:
    spare = _spare()
    dead = spare.pid
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    await asyncio.to_thread(wait_gone, dead, 5.0)
    server = EmbeddedServer(tmp_path / "data", separate_process=True)
    server.launch(spare)
    assert server.pid is not None and server.pid != dead
    try:
        assert await _round_trip(await server.start()) == "renew passport"
    finally:
        await server.stop()


def test_no_spare_when_the_environment_names_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGODB_URI", "mongodb://127.0.0.1:27017")
    assert SpareServer.start() is None


OWNER = """
import sys, time
from storage.embedded.spare import SpareServer
spare = SpareServer.start()
print(spare.pid, flush=True)
time.sleep(60)
"""


def test_a_spare_waiting_for_an_owner_that_died_exits() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert owner.stdout is not None
        spare = int(owner.stdout.readline())
        owner.kill()
        owner.wait(5)
        took = wait_gone(spare, 10.0)
        assert took is not None, "the spare outlived its owner by 10 s"
    finally:
        if owner.poll() is None:
            owner.kill()


def test_run_with_a_database_named_in_env_file_lets_the_spare_go(
    tmp_path: Path, mongo_server: str
) -> None:
    """The spare starts before ``.env`` is read; ``MONGODB_URI`` there ends it."""
    from tests.agent.cli.procs import children_of, free_port, run_env, start, wait_healthy

    port = free_port()
    (tmp_path / ".env").write_text(f"MONGODB_URI={mongo_server}\nMONGODB_DB=spare_env\n")
    env = {k: v for k, v in run_env(tmp_path, port).items() if k != "MONGODB_URI"}
    run = start(env, tmp_path)
    try:
        health = wait_healthy(run, port, within=30)
        assert health["db"] == "ok"
        deadline = time.monotonic() + 10
        while children_of(run.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children_of(run.pid) == []  # no database process: not the spare, nor another
        assert not (tmp_path / "data" / "db").exists()
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(30)
