"""MCP servers through the real SDK: a stdio server the manager starts and a streamable
HTTP server on loopback, both written with ``MCPServer`` (tests/fakes/mcp_server.py)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from agent.tools.mcp import session  # noqa: F401  (the SDK loaded: timings are the servers')
from agent.tools.mcp.client import McpServers
from agent.tools.mcp.config import StdioServer
from runtime.backoff import Backoff
from tests.fakes.mcp_kit import Gate, http_server, our_server_processes, stdio_server
from tests.waiting import WATCHDOG, until

FAST = Backoff(first=0.2, cap=1.0)
BASE_TOOLS = {"echo", "add", "record", "slow", "fail", "die"}


def manager(*configs: object, **kw: object) -> McpServers:
    options: dict[str, object] = {"start_timeout": 15.0, "backoff": FAST, "ping_interval": 0.3}
    options.update(kw)
    return McpServers(configs, **options)  # type: ignore[arg-type]


def state(servers: McpServers, name: str) -> str:
    return next(s.state for s in servers.status() if s.name == name)


async def test_both_transports_list_and_call_and_stop_leaves_no_process(tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    async with http_server("web", extra=3) as web:
        servers = manager(stdio_server("local", effects), web.config(), log_dir=tmp_path)
        await servers.start()
        try:
            assert sorted(servers.connected()) == ["local", "web"]
            by_server: dict[str, set[str]] = {}
            for tool in servers.tools():
                by_server.setdefault(tool.server, set()).add(tool.name)
            assert by_server["local"] == BASE_TOOLS
            assert by_server["web"] == BASE_TOOLS | {"tool_0", "tool_1", "tool_2"}
            add = next(t for t in servers.tools() if t.server == "local" and t.name == "add")
            assert add.description == "Add two integers."
            assert add.input_schema["required"] == ["a", "b"]

            assert await servers.call("local", "add", {"a": 2, "b": 40}) == {"content": "42"}
            assert await servers.call("web", "echo", {"text": "héllo"}) == {"content": "héllo"}
            assert await servers.call("local", "record", {"note": "one"}) == {
                "content": "recorded (1 in all)"
            }
            assert effects.read_text().splitlines() == ["one"]
            # The tool's own failure is the server's words, kept apart from ours.
            failed = await servers.call("web", "fail", {"message": "disk full"})
            assert set(failed) == {"tool_error"} and "disk full" in failed["tool_error"]
            assert "no tool 'nope'" in (await servers.call("web", "nope", {}))["error"]
            assert "no MCP server named 'x'" in (await servers.call("x", "echo", {}))["error"]
            assert our_server_processes()
        finally:
            await servers.stop()
        assert our_server_processes() == []
        assert {s.state for s in servers.status()} == {"stopped"}
        assert servers.tools() == []
        assert (
            "not connected (stopped)" in (await servers.call("web", "echo", {"text": ""}))["error"]
        )


async def test_a_server_that_fails_to_start_is_reported_and_does_not_block(
    tmp_path: Path,
) -> None:
    crashes = StdioServer(
        "crashes",
        sys.executable,
        ("-c", "import sys; sys.stderr.write('IMAP login refused\\n'); sys.exit(2)"),
    )
    servers = manager(
        StdioServer("missing", "/nonexistent/mcp-server"),
        crashes,
        stdio_server("local"),
        log_dir=tmp_path,
    )
    await servers.start()
    try:
        status = {s.name: s for s in servers.status()}
        assert status["local"].state == "connected"
        assert status["missing"].state == "failed"
        assert "command not found" in (status["missing"].error or "")
        assert status["crashes"].state == "failed"
        assert "IMAP login refused" in (status["crashes"].error or "")
        assert {t.server for t in servers.tools()} == {"local"}
        answer = await servers.call("missing", "echo", {})
        assert "'missing' is not connected (failed: command not found" in answer["error"]
        # What a server wrote to stderr is its words: shown in the status, never in
        # an error of ours the model reads.
        refused = await servers.call("crashes", "echo", {})
        assert refused == {
            "error": "MCP server 'crashes' is not connected (failed: Connection closed)"
        }
    finally:
        await servers.stop()
    assert our_server_processes() == []


async def test_a_server_being_tried_again_still_shows_why_it_failed(tmp_path: Path) -> None:
    # The first start writes to stderr and exits; the second hangs. While the second
    # is being tried, the status still reports the first failure in full.
    tries = tmp_path / "tries"
    script = (
        "import pathlib, sys, time\n"
        f"p = pathlib.Path({str(tries)!r})\n"
        "n = len(p.read_text()) if p.exists() else 0\n"
        "p.write_text('x' * (n + 1))\n"
        "if n == 0:\n"
        "    sys.stderr.write('IMAP login refused\\n'); sys.exit(2)\n"
        "time.sleep(60)\n"
    )
    servers = manager(StdioServer("flaky", sys.executable, ("-c", script)), log_dir=tmp_path)
    await servers.start()
    try:
        await until(lambda: tries.exists() and len(tries.read_text()) == 2, "a second try")
        (status,) = servers.status()
        assert status.state == "failed"
        assert "IMAP login refused" in (status.error or "")
    finally:
        await servers.stop()


async def test_a_server_that_never_answers_fails_at_the_start_timeout() -> None:
    silent = StdioServer("silent", sys.executable, ("-c", "import time; time.sleep(60)"))
    servers = manager(silent, start_timeout=2.0)
    async with asyncio.timeout(WATCHDOG):  # a start that waited for the process: a hang
        await servers.start()
    try:
        [status] = servers.status()
        assert (status.state, status.error) == ("failed", "did not start within 2 seconds")
    finally:
        await servers.stop()


async def test_start_without_waiting_returns_at_once_and_tools_appear_later() -> None:
    async with Gate() as gate:
        servers = manager(stdio_server("local", gate=gate))
        # The server is held at the gate until the test opens it: a start that waited
        # for it would never return.
        async with asyncio.timeout(WATCHDOG):
            await servers.start(wait=False)
        try:
            assert state(servers, "local") == "starting"
            await gate.reached.wait()
            assert state(servers, "local") == "starting"
            assert servers.tools() == []
            gate.open()
            await until(lambda: state(servers, "local") == "connected")
            assert len(servers.tools()) == len(BASE_TOOLS)
        finally:
            await servers.stop()


async def test_a_server_that_dies_mid_call_errors_and_is_restarted(tmp_path: Path) -> None:
    servers = manager(stdio_server("local", tmp_path / "fx.txt"))
    await servers.start()
    try:
        died = await servers.call("local", "die", {})
        assert died == {"error": "MCP server 'local' stopped during the call to 'die'"}
        assert state(servers, "local") == "restarting"
        refused = await servers.call("local", "echo", {"text": "x"})
        assert "not connected (restarting: the connection was lost)" in refused["error"]
        await until(lambda: state(servers, "local") == "connected")
        assert await servers.call("local", "echo", {"text": "back"}) == {"content": "back"}
    finally:
        await servers.stop()


async def test_an_http_server_that_goes_away_is_reconnected_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent.tools.mcp.client")

    def tries() -> int:
        return sum(r.getMessage().startswith("MCP server web: next try") for r in caplog.records)

    async with http_server("web") as web:
        servers = manager(web.config())
        await servers.start()
        try:
            web.kill()
            answer = await servers.call("web", "echo", {"text": "x"})
            assert "error" in answer
            await until(lambda: state(servers, "web") == "failed")
            refused = tries()
            await until(lambda: tries() >= refused + 2, "two more tries, refused")
            assert state(servers, "web") == "failed"
            await web.start()
            await until(lambda: state(servers, "web") == "connected")
            assert await servers.call("web", "echo", {"text": "again"}) == {"content": "again"}
        finally:
            await servers.stop()


async def test_a_slow_tool_hits_its_timeout_and_the_server_stays_usable() -> None:
    servers = manager(stdio_server("local"), call_timeout=600.0)
    await servers.start()
    try:
        async with asyncio.timeout(WATCHDOG):  # the tool sleeps 600 s, the call may not
            answer = await servers.call("local", "slow", {"seconds": 600}, timeout=0.5)
        assert answer == {"error": "local__slow did not answer within 0.5 seconds"}
        assert state(servers, "local") == "connected"
        assert await servers.call("local", "slow", {"seconds": 0}) == {"content": "slept 0.0"}
    finally:
        await servers.stop()
