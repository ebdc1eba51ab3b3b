"""``/healthz`` tells a database that is busy (a long query holds it) from one that is gone."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from storage.db import open_database


def _server_pid(data_dir: Path) -> int:
    """The embedded server child started for ``data_dir`` (found by its command line)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"storage.embedded_server" in cmdline and any(
            str(data_dir).encode() in part for part in cmdline
        ):
            return int(entry.name)
    raise AssertionError("no embedded server process found")


async def test_busy_and_unreachable_are_told_apart(tmp_path: Path) -> None:
    async with open_database(None, "health", tmp_path) as database:
        assert await database.health() == "ok"
        pid = _server_pid(tmp_path)
        os.kill(pid, signal.SIGSTOP)  # frozen: the kernel takes connections, nothing answers
        try:
            assert await database.health(seconds=0.5) == "busy"
            assert await database.ping() is False
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await database.health() == "ok"
        os.kill(pid, signal.SIGKILL)
        for _ in range(20):
            if await database.health(seconds=0.3) == "unreachable":
                break
        assert await database.health(seconds=0.3) == "unreachable"
