"""Real ``watchkeeper`` processes for tests: start one, find its database child, wait."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A local TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    """The settings ``test_run_process.py`` uses: a key, no real service reachable."""
    env = {k: v for k, v in os.environ.items() if "KEY" not in k and "TOKEN" not in k}
    env.update(
        OPENAI_API_KEY="sk-test-0123456789",
        ADMIN_TOKEN="admin-secret-0123456789",
        DATA_DIR=str(tmp_path / "data"),
        HTTP_PORT=str(port),
    )
    env.update(extra)
    return env


def start(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent", *(args or ("run",))],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def output_of(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=10)
    return out or ""


def wait_healthy(proc: subprocess.Popen[str], port: int, within: float) -> dict[str, object]:
    """``/healthz`` once it answers 200; fails at once (with the output) if ``proc`` exits."""
    deadline = time.monotonic() + within
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}:\n{output_of(proc)}")
        try:
            url = f"http://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return dict(json.loads(resp.read()))
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not healthy within {within:.0f} s:\n{output_of(proc)}"
                ) from None
            time.sleep(0.05)


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # state, ppid, ...


def children_of(pid: int, marker: str = "storage.embedded.server") -> list[int]:
    """Live child processes of ``pid`` whose command line contains ``marker`` (Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or fields[1] != str(pid) or fields[0] == "Z":
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped counts as exited)."""
    fields = _stat(pid)
    return fields is None or fields[0] in ("Z", "X")


def wait_gone(pid: int, within: float) -> float | None:
    """Seconds until ``pid`` exited, or None if it is still there after ``within``."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        if gone(pid):
            return time.monotonic() - started
        time.sleep(0.01)
    return None


async def until_while_running(
    predicate: Callable[[], object], within: float, what: str, proc: subprocess.Popen[str]
) -> None:
    """Return once ``predicate()`` holds; fail at once, with its output, if ``proc`` exits
    first, and after ``within`` seconds (a watchdog) otherwise."""
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}:\n{output_of(proc)}")
        assert asyncio.get_running_loop().time() < deadline, f"no {what} within {within} s"
        await asyncio.sleep(0.02)
