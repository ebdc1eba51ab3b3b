"""The embedded database's owner waits, bounded and logged, for an old server to let go.

An old server (one whose parent was killed and that is still closing) holds WiredTiger's
lock on ``DATA_DIR/db``; a stand-in process holding that same lock plays it here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.embedded import owner
from storage.embedded.owner import EmbeddedServer, EmbeddedUnavailable
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


async def _make_store(data_dir: Path) -> None:
    server = EmbeddedServer(data_dir)
    await server.start()
    await server.stop()
    assert (data_dir / "db" / "WiredTiger.lock").exists()


@contextlib.contextmanager
def _holding(data_dir: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    lock = data_dir / "db" / "WiredTiger.lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait(5)


async def test_a_new_owner_waits_for_the_old_server_to_release_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    await _make_store(data_dir)
    server = EmbeddedServer(data_dir)
    with _holding(data_dir, 1.5) as holder, caplog.at_level(logging.INFO, "storage.embedded.owner"):
        await server.start()
    try:
        assert server.owner  # once the holder let go: "released" below
        waiting = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
        assert len(waiting) == 1, caplog.text
        assert f"pid {holder.pid}" in waiting[0] and str(data_dir / "db") in waiting[0]
        assert "released" in caplog.text
    finally:
        await server.stop()


async def test_a_store_never_released_is_one_line_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    await _make_store(data_dir)
    monkeypatch.setattr(owner, "RELEASE_TIMEOUT", 1.0)
    server = EmbeddedServer(data_dir)
    with _holding(data_dir, 60) as holder:
        with pytest.raises(EmbeddedUnavailable) as info:
            async with asyncio.timeout(30):  # watchdog: the holder stays for 60 s
                await server.start()
        assert holder.poll() is None, "a holder that is not our database server was killed"
    message = str(info.value)
    assert "\n" not in message
    assert str(data_dir / "db") in message and f"pid {holder.pid}" in message
    assert not server.owner
    # The DATA_DIR lock was let go: the next try owns the store at once.
    await server.start()
    try:
        assert server.owner
    finally:
        await server.stop()


async def test_a_busy_store_the_probe_misses_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the lock probe cannot see the holder, the child's own busy exit is retried."""
    data_dir = tmp_path / "data"
    await _make_store(data_dir)
    monkeypatch.setattr(owner, "store_holder", lambda path: None)
    server = EmbeddedServer(data_dir, separate_process=True)
    log = data_dir / "db.log"
    with _holding(data_dir, 60):  # held until a child found it in use, however slow
        starting = asyncio.create_task(server.start())
        await until(
            lambda: log.exists() and "in use" in log.read_text(), "a child found the store in use"
        )
        assert not starting.done()
    try:
        await starting  # the holder let go: a later child owns the store
        assert server.owner
    finally:
        await server.stop()


async def test_a_busy_store_the_probe_misses_is_retried_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same in the agent's own process (the default): the open that finds the store
    in use is retried, logged once, until the holder lets go."""
    data_dir = tmp_path / "data"
    await _make_store(data_dir)
    monkeypatch.setattr(owner, "store_holder", lambda path: None)
    server = EmbeddedServer(data_dir)
    caplog.set_level(logging.INFO, "storage.embedded.owner")
    with _holding(data_dir, 60):  # held until an open found it in use, however slow
        starting = asyncio.create_task(server.start())
        await until(lambda: "waiting up to" in caplog.text, "an open found the store in use")
        assert not starting.done()
    try:
        await starting  # the holder let go: a later open owns the store
        assert server.owner and server.pid is None
    finally:
        await server.stop()
    assert caplog.text.count("waiting up to") == 1, caplog.text


PARENT = """
import asyncio, sys
from pathlib import Path
from storage.embedded.owner import EmbeddedServer

async def main():
    server = EmbeddedServer(Path(sys.argv[1]), separate_process=True)
    await server.start()
    print(server.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_the_server_process_stops_at_once_when_its_owner_is_killed(tmp_path: Path) -> None:
    from tests.agent.cli.procs import gone, wait_gone

    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "data")],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())  # bounded by the per-test timeout
        assert not gone(child)  # serving; nothing but its owner's death ends it
        parent.kill()
        parent.wait(5)
        assert wait_gone(child, 30.0) is not None, "the server outlived its owner by 30 s"
        # Told by the kernel at once (its parent-death SIGTERM: nobody else sent one
        # to a SIGKILLed owner's child), not found by the once-a-second poll.
        log = (tmp_path / "data" / "db.log").read_text()
        assert "stopping on SIGTERM" in log and "is gone" not in log, log
    finally:
        if parent.poll() is None:
            parent.kill()


async def test_a_storm_of_stop_signals_stops_the_server_cleanly(tmp_path: Path) -> None:
    """Signals arriving while the last one is being handled (a parent-death signal, then
    the owner's, then an impatient operator's) once deadlocked the server: the handler
    set a ``threading.Event`` and, re-entered, waited on the lock it already held. Such a
    server never let go of the store, and the next start gave up after its wait."""
    from tests.agent.cli.procs import wait_gone

    server = EmbeddedServer(tmp_path / "data", separate_process=True)
    await server.start()
    pid = server.pid
    assert pid is not None
    try:
        until = time.monotonic() + 0.3
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < until:
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGINT)
        took = await asyncio.to_thread(wait_gone, pid, 10.0)
        assert took is not None, "the server did not stop within 10 s of the signals"
    finally:
        await server.stop()
    assert "Traceback" not in await asyncio.to_thread((tmp_path / "data" / "db.log").read_text)


BUSY_OWNER = """
import asyncio, sys, threading
from pathlib import Path
from pymongo import MongoClient
from storage.embedded.owner import EmbeddedServer

async def main():
    server = EmbeddedServer(Path(sys.argv[1]), separate_process=True)
    client = MongoClient(await server.start(), directConnection=True)
    client.w.ai_t.insert_one({"_id": 1, "s": "a" * 256_000})

    def quadratic():  # straight to the server, past the sandbox: hours on this value
        client.w.ai_t.find_one({"s": {"$regex": "[a-z]+[0-9]"}})

    threading.Thread(target=quadratic, daemon=True).start()
    print(server.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _busy_owner(data_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """An owner process and its database server, once the match has had a second of the
    server's CPU."""
    owner = subprocess.Popen(
        [sys.executable, "-c", BUSY_OWNER, str(data_dir)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    child = 0
    try:
        assert owner.stdout is not None
        child = int(owner.stdout.readline())  # bounded by the per-test timeout
        idle = _cpu_seconds(child)
        while _cpu_seconds(child) < idle + 1.0:
            time.sleep(0.05)
    except BaseException:
        owner.kill()
        if child:  # busy for hours otherwise
            os.kill(child, signal.SIGKILL)
        raise
    return owner, child


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
async def test_a_restart_after_kill_9_ends_a_server_stuck_in_a_match(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28: the owner killed with SIGKILL while its database matched a quadratic
    regex on a 256,000-character value; the server could not act on its parent-death
    signal, and the restart gave up after 15 s. Now the restart ends it and starts."""
    from pymongo import AsyncMongoClient

    from tests.agent.cli.procs import gone, wait_gone

    data_dir = tmp_path / "data"
    owner, child = await asyncio.to_thread(_busy_owner, data_dir)
    try:
        owner.kill()
        owner.wait(5)
        server = EmbeddedServer(data_dir, separate_process=True)
        with caplog.at_level(logging.INFO, "storage.embedded.owner"):
            uri = await server.start()
        try:
            assert server.owner
            ended = [r.getMessage() for r in caplog.records if "ending it" in r.getMessage()]
            assert len(ended) == 1 and f"pid {child}" in ended[0], caplog.text
            assert await asyncio.to_thread(wait_gone, child, 10.0) is not None
            client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
                uri, directConnection=True
            )
            try:  # the store is journaled: what was committed is still there
                stored = await client.w.ai_t.find_one({"_id": 1})
            finally:
                await client.close()
            assert stored is not None and stored["s"] == "a" * 256_000
        finally:
            await server.stop()
    finally:
        if owner.poll() is None:
            owner.kill()
        if not gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("module", ["storage.embedded.server", "storage.embedded_server"])
def test_an_orphaned_server_is_recognised_by_this_and_the_previous_module_name(
    tmp_path: Path, module: str
) -> None:
    """The first start after an upgrade must still end a stuck server the previous
    version started (``storage.embedded_server``), not wait it out and fail."""
    code = "import sys; print('up', flush=True); sys.stdin.read()"

    def started(parent: int) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-c", code, module, "--parent-pid", str(parent)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        # Its command line is its own only once it runs: until the exec, /proc shows
        # this test process's (a busy machine can be that slow).
        assert process.stdout is not None and process.stdout.readline() == b"up\n"
        return process

    orphan, owned = started(parent=999_999_999), started(parent=os.getpid())
    try:
        assert owner.orphaned_server(orphan.pid, tmp_path)
        assert not owner.orphaned_server(owned.pid, tmp_path)  # its owner is alive: us
    finally:
        for process in (orphan, owned):
            process.kill()
            process.wait()
