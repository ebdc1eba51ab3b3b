"""``/healthz`` tells a database that is busy (a long query holds it) from one that is gone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from storage.db import open_database
from storage.embedded.owner import EmbeddedServer


def _wait_for_state(pid: int, stopped: bool) -> None:
    """Wait until the kernel reports ``pid`` stopped (``T``) or running again."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if (state == "T") == stopped:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not {'stop' if stopped else 'continue'}")


async def test_busy_and_unreachable_are_told_apart(
    tmp_path: Path, private_embedded: EmbeddedServer
) -> None:
    server = private_embedded
    async with open_database(None, "health", tmp_path, server=server) as database:
        assert await database.health() == "ok"
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # frozen: the kernel takes connections, nothing answers
        _wait_for_state(pid, stopped=True)
        try:
            assert await database.health(seconds=0.5) == "busy"
            assert await database.ping() is False
        finally:
            os.kill(pid, signal.SIGCONT)
            _wait_for_state(pid, stopped=False)
        assert await database.health() == "ok"
        os.kill(pid, signal.SIGKILL)
        for _ in range(20):
            if await database.health(seconds=0.3) == "unreachable":
                break
        assert await database.health(seconds=0.3) == "unreachable"


async def test_a_server_handed_to_the_opener_outlives_the_database_opened_on_it(
    tmp_path: Path, private_embedded: EmbeddedServer
) -> None:
    """``watchkeeper run`` stops the server it launched after the app; the tests' one
    serves every app of the session."""
    async with open_database(None, "handed", tmp_path, server=private_embedded) as database:
        assert database.owns_server
        pid = private_embedded.pid
        await database.db["t"].insert_one({"n": 1})
    assert pid is not None and private_embedded.pid == pid
    os.kill(pid, 0)  # still running
    async with open_database(None, "handed", tmp_path, server=private_embedded) as again:
        assert again.owns_server and private_embedded.pid == pid
        assert await again.db["t"].count_documents({}) == 1
