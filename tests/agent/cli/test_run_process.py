"""``watchkeeper run`` as a real process: start, serve, log, stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.agent.cli.procs import free_port


def _healthz(port: int, within: float = 30.0) -> dict[str, object]:
    import json

    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                return dict(json.loads(resp.read()))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_run_starts_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    secret = "sk-do-not-log-this-0123456789"
    env = {k: v for k, v in os.environ.items() if "KEY" not in k and "TOKEN" not in k}
    env.update(
        OPENAI_API_KEY=secret,
        ADMIN_TOKEN="admin-secret-0123456789",
        DATA_DIR=str(tmp_path / "data"),
        HTTP_PORT=str(port),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "run"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        health = _healthz(port)
        assert health["status"] == "ok" and health["db"] == "ok"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    for part in (
        "database: embedded",
        "model: openai",
        "alerts:",
        "scheduler:",
        "http: listening",
        "dashboard:",
    ):
        assert sum(part in line for line in output.splitlines()) == 1, (part, output)
    assert output.rstrip().endswith("stopped")
    assert f"dashboard: http://127.0.0.1:{port}/ (token in .env)" in output
    assert secret not in output and "admin-secret" not in output
    assert not (tmp_path / "data" / "db.uri").exists()  # the database process has stopped


def test_the_dashboard_line_names_a_reachable_address_and_the_missing_token() -> None:
    from agent.cli.main import dashboard_line
    from tests.conftest import make_settings

    everywhere = make_settings(http_host="0.0.0.0", admin_token="admin-secret-0123456789")
    assert dashboard_line(everywhere, 8080) == "dashboard: http://127.0.0.1:8080/ (token in .env)"
    v6 = make_settings(http_host="::1", admin_token=None)
    assert dashboard_line(v6, 9) == (
        "dashboard: http://[::1]:9/ needs ADMIN_TOKEN in .env (at least 16 characters)"
    )
