"""MCP servers start with the app in the background, show in ``/status`` and
``/api/status``, and stop with it; a bad file or server never blocks start-up."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from agent.app.mcp_feature import mcp_feature
from agent.app.status import status_data, status_text
from agent.tools.mcp_config import StdioServer
from tests.agent.tools.test_mcp_client import our_server_processes
from tests.fakes.chat_app import chat_app
from tests.fakes.mcp_kit import stdio_server
from tests.fakes.scripted import ScriptedModel

ROOT = Path(__file__).resolve().parents[3]


def write_config(path: Path, *servers: StdioServer) -> Path:
    doc = {
        "mcpServers": {
            s.name: {"command": s.command, "args": list(s.args), "env": dict(s.env)}
            for s in servers
        }
    }
    path.write_text(json.dumps(doc))
    return path


async def test_servers_start_in_the_background_and_stop_with_the_app(
    mongo_server: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_config(
        data / "mcp.json",  # the default place
        stdio_server("local"),
        StdioServer("broken", "/nonexistent/imap-mcp"),
    )
    model = ScriptedModel(lambda r: "ok")
    began = time.monotonic()
    async with chat_app(
        mongo_server, f"t_{uuid.uuid4().hex[:8]}", model, data, features=[mcp_feature]
    ) as chat:
        assert time.monotonic() - began < 10
        servers = chat.app.deps.mcp
        assert servers is not None
        deadline = time.monotonic() + 20
        while "local" not in servers.connected():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        data_now = await status_data(chat.app)  # what GET /api/status answers
        by_name = {s["name"]: s for s in data_now["mcp"]["servers"]}
        assert by_name["local"] == {
            "name": "local",
            "transport": "stdio",
            "state": "connected",
            "tools": 6,
            "error": None,
        }
        assert by_name["broken"]["state"] == "failed"
        assert "command not found" in by_name["broken"]["error"]
        text = status_text(data_now, "m")
        assert "MCP: local connected (6 tools), broken failed (command not found" in text
        assert [r for r in await chat.ask("/status") if "MCP: local connected" in r]
        assert our_server_processes()
    assert our_server_processes() == []


async def test_a_bad_servers_file_is_reported_and_the_app_still_starts(
    mongo_server: str, tmp_path: Path
) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": {"mail box": {"command": "x"}}}')
    model = ScriptedModel(lambda r: "ok")
    async with chat_app(
        mongo_server,
        f"t_{uuid.uuid4().hex[:8]}",
        model,
        tmp_path / "data",
        features=[mcp_feature],
        mcp_config=bad,
    ) as chat:
        assert chat.app.deps.mcp is None
        data_now = await status_data(chat.app)
        assert "server 'mail box': the name" in data_now["mcp"]["error"]
        assert "MCP: config error:" in status_text(data_now, "m")
        assert await chat.ask("hi") == ["ok"]


def test_without_servers_the_sdk_is_not_imported(tmp_path: Path) -> None:
    script = (
        "import sys, agent.app.features, agent.cli.doctor, agent.tools.catalog;"
        "print('mcp' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "False", done.stderr
