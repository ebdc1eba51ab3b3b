"""One ``watchkeeper run`` per DATA_DIR, and a restart right after ``kill -9`` works.

Real processes (``python -m agent run``), the settings of ``test_run_process.py``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.cli.procs import (
    children_of,
    free_port,
    run_env,
    start,
    wait_gone,
    wait_healthy,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out


def test_restart_right_after_kill_9_is_healthy_within_seconds(tmp_path: Path) -> None:
    port = free_port()
    env = run_env(tmp_path, port)
    first = start(env, tmp_path)
    second = None
    try:
        began = time.monotonic()
        wait_healthy(first, port, within=20)
        cold = time.monotonic() - began
        first.kill()  # SIGKILL: no clean-up at all
        first.wait(5)
        began = time.monotonic()
        second = start(env, tmp_path)
        health = wait_healthy(second, port, within=60)
        restart = time.monotonic() - began
        print(f"\ncold start to healthy {cold:.2f} s; after kill -9 to healthy {restart:.2f} s")
        assert health["status"] == "ok" and health["db"] == "ok"
        code, out = _stop(second)
        assert code == 0, out
        assert "Traceback" not in out
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()


def test_the_database_child_dies_with_its_killed_parent(tmp_path: Path) -> None:
    port = free_port()
    run = start(run_env(tmp_path, port, EMBEDDED_DB_SEPARATE_PROCESS="1"), tmp_path)
    try:
        wait_healthy(run, port, within=20)
        children = children_of(run.pid)
        assert len(children) == 1, children
        run.kill()
        run.wait(5)
        took = wait_gone(children[0], within=30.0)
        print(f"\ndatabase child gone {took} s after its parent was killed")
        assert took is not None, "the database child outlived its parent by 30 s"
        # Told by the kernel at once (its parent-death SIGTERM: nobody else sent one
        # to a SIGKILLed owner's child), not found by the once-a-second poll.
        log = (tmp_path / "data" / "db.log").read_text()
        assert "stopping on SIGTERM" in log, log
        assert "is gone" not in log, log
    finally:
        if run.poll() is None:
            run.kill()


def test_a_second_run_on_the_same_data_dir_is_refused_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    first = start(run_env(tmp_path, port), tmp_path)
    try:
        wait_healthy(first, port, within=20)
        # Another port, so nothing but DATA_DIR is shared.
        second = subprocess.run(
            [sys.executable, "-m", "agent", "run"],
            cwd=tmp_path, env=run_env(tmp_path, free_port()), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        out = (second.stdout + second.stderr).strip()
        assert second.returncode != 0, out
        assert len(out.splitlines()) == 1, out  # nothing was started, so nothing logged
        assert "already running" in out and f"pid {first.pid}" in out, out
        assert str(tmp_path / "data") in out
        health = wait_healthy(first, port, within=5)
        assert health["status"] == "ok" and health["db"] == "ok"
        code, log = _stop(first)
        assert code == 0, log
    finally:
        if first.poll() is None:
            first.kill()


@pytest.mark.parametrize(
    ("separate", "database_children"),
    [("0", 0), ("1", 1)],
    ids=["database-in-the-agent", "database-in-a-process-of-its-own"],
)
def test_schedule_doctor_and_chat_attach_beside_a_running_run(
    tmp_path: Path, separate: str, database_children: int
) -> None:
    port = free_port()
    env = run_env(tmp_path, port, EMBEDDED_DB_SEPARATE_PROCESS=separate)
    run = start(env, tmp_path)
    try:
        wait_healthy(run, port, within=20)
        schedule = subprocess.run(
            [sys.executable, "-m", "agent", "schedule"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        assert schedule.returncode == 0, schedule.stdout + schedule.stderr
        assert schedule.stdout.startswith("Next 24 h"), schedule.stdout
        # A closed local port stands in for the provider: doctor must stay offline.
        doctor_env = dict(env, OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1")
        doctor = subprocess.run(
            [sys.executable, "-m", "agent", "doctor"],
            cwd=tmp_path, env=doctor_env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert "[ok  ] database: embedded" in doctor.stdout, doctor.stdout + doctor.stderr
        assert "served by the running watchkeeper" in doctor.stdout  # not a copy of its own
        chat = subprocess.run(
            [sys.executable, "-m", "agent", "chat"],
            cwd=tmp_path, env=env, input="/quit\n", capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        assert chat.returncode == 0, chat.stdout + chat.stderr
        # Still the one database, owned by run: on a thread of run's own, by default.
        assert len(children_of(run.pid)) == database_children
        assert wait_healthy(run, port, within=5)["db"] == "ok"
        code, log = _stop(run)
        assert code == 0, log
    finally:
        if run.poll() is None:
            run.kill()


HOLD_STORE = """
import fcntl, os, sys, time
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""
RUN_WITH_SHORT_WAIT = (
    "import storage.embedded.owner as e; e.RELEASE_TIMEOUT = 2.0; "
    "from agent.cli.main import main; raise SystemExit(main(['run']))"
)


def test_run_gives_up_with_one_line_when_the_store_is_never_released(tmp_path: Path) -> None:
    """A store some other process keeps open: a bounded wait, then one line, exit 1."""
    lock = tmp_path / "data" / "db" / "WiredTiger.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run = subprocess.run(
            [sys.executable, "-c", RUN_WITH_SHORT_WAIT],
            cwd=tmp_path, env=run_env(tmp_path, free_port()), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=60,  # a watchdog: the wait is 2 s
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait(5)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Traceback" not in out
    assert f"waiting up to 2 s for the previous database server (pid {holder.pid})" in out
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("watchkeeper: the database in ") and f"(pid {holder.pid})" in last
    assert "http:" not in out and "channel:" not in out
