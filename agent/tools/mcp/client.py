"""MCP servers (``MCP_CONFIG``): connect, list their tools, call them, restart the dead.

Each server has one supervising task that owns its connection (the SDK's transports
and ``ClientSession`` are context managers that must be left in the task that entered
them). It connects within the start timeout, lists the tools, then pings until the
connection is lost or the app stops; a lost or failed server is tried again with
exponential backoff. Other tasks call tools on the live session.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from agent.tools.mcp import McpTool, describe
from agent.tools.mcp.config import ServerConfig, StdioServer
from runtime.backoff import Backoff, Pauses
from runtime.tasks import wait_event

if TYPE_CHECKING:  # the SDK (~1.4 s to import) loads only when a server is configured
    from mcp import ClientSession

log = logging.getLogger(__name__)

ServerState = Literal["starting", "connected", "failed", "restarting", "stopped"]
LOG_TAIL = 400
"""Characters of a stdio server's stderr quoted when it fails to start."""
LOG_MAX_BYTES = 1_000_000
RESTART_BACKOFF = Backoff(first=1.0, cap=300.0)
"""Waits before restarting a server; one that stayed up for ``cap`` starts over."""


@dataclass(frozen=True)
class ServerStatus:
    name: str
    transport: Literal["stdio", "http"]
    state: ServerState
    error: str | None
    tools: int


class _Server:
    """One server's connection, owned by its supervising task."""

    def __init__(self, config: ServerConfig, log_dir: Path | None) -> None:
        self.config = config
        self.log_dir = log_dir
        self.state: ServerState = "starting"
        self.error: str | None = None
        """What went wrong, in our words (the model may read it)."""
        self.stderr = ""
        """The end of what a stdio server wrote before it failed to start (its words)."""
        self.tools: list[McpTool] = []
        self.session: ClientSession | None = None
        self.lost = asyncio.Event()
        self.settled = asyncio.Event()
        """Set once the first attempt has connected or failed."""
        self.task: asyncio.Task[None] | None = None
        self.restarts = 0
        self.connected_at: float | None = None

    def status(self) -> ServerStatus:
        transport: Literal["stdio", "http"] = (
            "stdio" if isinstance(self.config, StdioServer) else "http"
        )
        error = self.error
        if error and self.stderr:
            error += f"; its stderr ends: {self.stderr}"
        return ServerStatus(self.config.name, transport, self.state, error, len(self.tools))


class McpServers:
    """Every configured server; ``start`` returns within the start timeout."""

    def __init__(
        self,
        configs: Sequence[ServerConfig],
        *,
        start_timeout: float = 20.0,
        call_timeout: float = 60.0,
        backoff: Backoff = RESTART_BACKOFF,
        ping_interval: float = 15.0,
        log_dir: Path | None = None,
    ) -> None:
        self._servers = {c.name: _Server(c, log_dir) for c in configs}
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self._backoff = backoff
        self._ping_interval = ping_interval
        self._stopping = False
        self._stopped = asyncio.Event()
        self._sdk: asyncio.Task[Any] | None = None

    async def start(self, *, wait: bool = True) -> None:
        """Start every server at once; with ``wait``, return when each has connected or
        failed (never later than the start timeout, counted once the SDK is loaded)."""
        if self._sdk is None and self._servers:
            # In a thread: the import takes over a second, the loop keeps serving.
            self._sdk = asyncio.create_task(
                asyncio.to_thread(importlib.import_module, "agent.tools.mcp.session")
            )
        for server in self._servers.values():
            if server.task is None:
                server.task = asyncio.create_task(
                    self._supervise(server), name=f"mcp-{server.config.name}"
                )
        if wait:
            await self.wait_started()

    async def wait_started(self) -> None:
        if self._sdk is not None:
            with contextlib.suppress(Exception):  # each server reports it
                await asyncio.shield(self._sdk)
        waits = [s.settled.wait() for s in self._servers.values()]
        if waits:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.start_timeout + 1):
                    await asyncio.gather(*waits)

    async def until_settled(self) -> None:
        """Wait, at most the start timeout, for the servers still on their first try.

        A turn that starts while servers are connecting (the first message after start,
        a message replayed after a restart) gets their tools this way. A server that
        fails or is still starting when the wait ends is left out of the turn, with a
        log line; one that has connected or failed once is never waited for again."""
        waiting = [s for s in self._servers.values() if not s.settled.is_set()]
        if not waiting or self._stopping:
            return
        names = ", ".join(s.config.name for s in waiting)
        log.info(
            "waiting up to %gs for MCP server(s) still starting: %s", self.start_timeout, names
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.start_timeout):
                await asyncio.gather(*(s.settled.wait() for s in waiting))
        missing = [s for s in waiting if s.state != "connected"]
        if missing:
            log.warning(
                "answering without MCP server(s) %s",
                ", ".join(f"{s.config.name} ({s.error or s.state})" for s in missing),
            )

    def tools(self) -> list[McpTool]:
        """The tools of the servers connected now (by server, then as the server lists them)."""
        return [t for s in self._servers.values() if s.state == "connected" for t in s.tools]

    def connected(self) -> list[str]:
        """Names of the servers connected now."""
        return [name for name, s in self._servers.items() if s.state == "connected"]

    def status(self) -> list[ServerStatus]:
        return [s.status() for s in self._servers.values()]

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """``{"content": "<the text parts>"}`` (``"structured"`` instead when the server
        sent only structured content), ``{"tool_error": "..."}`` with the failure the
        server reported (its words), or our own ``{"error": "..."}``: unknown server or
        tool, not connected, timeout, the server dying mid-call."""
        entry = self._servers.get(server)
        if entry is None:
            known = ", ".join(self._servers) or "none"
            return {"error": f"no MCP server named {server!r} (configured: {known})"}
        session = entry.session
        if session is None or entry.state != "connected":
            why = f": {entry.error}" if entry.error else ""  # ours; its stderr is not
            return {"error": f"MCP server {server!r} is not connected ({entry.state}{why})"}
        if not any(t.name == tool for t in entry.tools):
            return {"error": f"MCP server {server!r} has no tool {tool!r}"}
        limit = self.call_timeout if timeout is None else timeout
        from agent.tools.mcp import session as mcp_session

        answer, lost = await mcp_session.call(session, server, tool, arguments, limit)
        if lost:
            _lose(entry)
        return answer

    async def stop(self) -> None:
        """Close every connection and end every server process."""
        self._stopping = True
        self._stopped.set()
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        for server in self._servers.values():
            server.lost.set()
            server.settled.set()  # a turn waiting for it goes on
            if server.state != "connected" and server.task is not None:
                server.task.cancel()  # connecting or waiting to retry: nothing to close
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        for server in self._servers.values():
            server.state, server.session, server.task = "stopped", None, None

    async def _supervise(self, server: _Server) -> None:
        try:
            if self._sdk is not None:
                await asyncio.shield(self._sdk)
        except Exception as exc:
            server.state, server.error = "failed", f"cannot load the MCP SDK ({describe(exc)})"
            server.settled.set()
            return
        pauses = Pauses(self._backoff, sleep=self._until_stopped)
        while not self._stopping:
            began = time.monotonic()
            server.connected_at = None
            try:
                await self._connect_once(server)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                server.error = describe(exc)
                log.warning("MCP server %s: %s", server.config.name, server.status().error)
            server.session, server.tools = None, []
            server.settled.set()
            if self._stopping:
                break
            lost = server.connected_at is not None
            up_for = time.monotonic() - (server.connected_at or began)
            if lost and up_for >= self._backoff.cap:
                pauses.reset()  # it ran well for a while: start the waits over
            server.state = "restarting" if lost else "failed"
            log.info("MCP server %s: next try in %.1fs", server.config.name, pauses.upcoming)
            server.lost.clear()
            await pauses.sleep()
            server.restarts += 1

    async def _until_stopped(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when the manager stops."""
        await wait_event(self._stopped, seconds)

    async def _connect_once(self, server: _Server) -> None:
        """Connect, list, serve until lost; raises what went wrong."""
        stderr = _open_log(server)
        start = stderr.tell() if stderr is not None else 0
        too_slow = f"did not start within {self.start_timeout:g} seconds"
        timed_out = False
        # The last failure's error and stderr stand until this attempt settles: a status
        # read while the server is being tried again still says why it failed.

        def expire() -> None:  # reported at once; the process may take a while to end
            nonlocal timed_out
            timed_out = True
            server.state, server.error = "failed", too_slow
            server.stderr = _tail(stderr, start)
            server.settled.set()
            scope.cancel()

        try:
            from agent.tools.mcp import session as mcp_session

            with mcp_session.CancelScope() as scope:
                timer = asyncio.get_running_loop().call_later(self.start_timeout, expire)
                try:
                    async with mcp_session.open_session(server.config, stderr) as session:
                        tools = await mcp_session.list_tools(
                            session, server.config.name, server.config.trust_read
                        )
                        timer.cancel()
                        server.tools, server.session = tools, session
                        server.state, server.error, server.stderr = "connected", None, ""
                        server.connected_at = time.monotonic()
                        server.settled.set()
                        log.info(
                            "MCP server %s: connected, %d tools", server.config.name, len(tools)
                        )
                        await self._watch(server, session)
                finally:
                    timer.cancel()
        except Exception:
            if server.connected_at is None:
                server.stderr = _tail(stderr, start)
            raise
        finally:
            tail = _tail(stderr, start)
            if stderr is not None:
                stderr.close()
        if timed_out:
            server.stderr = tail
            raise TimeoutError(too_slow)
        if not self._stopping:
            raise ConnectionError("the connection was lost")

    async def _watch(self, server: _Server, session: ClientSession) -> None:
        """Return when the connection is lost or the app stops."""
        while not server.lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ping_interval):
                    await server.lost.wait()
            if server.lost.is_set():
                return
            from agent.tools.mcp import session as mcp_session

            if not await mcp_session.alive(session, min(self._ping_interval, 10.0)):
                return


def _lose(server: _Server) -> None:
    """The connection is gone: no more calls on it; its supervisor reconnects."""
    if server.state == "connected":
        server.state, server.error = "restarting", "the connection was lost"
    server.lost.set()


def _open_log(server: _Server) -> TextIO | None:
    """The stdio server's stderr file (``<log_dir>/<name>.log``), kept across restarts
    and started afresh past a megabyte; positioned at its end."""
    if not isinstance(server.config, StdioServer) or server.log_dir is None:
        return None
    server.log_dir.mkdir(parents=True, exist_ok=True)
    path = server.log_dir / f"{server.config.name}.log"
    big = path.is_file() and path.stat().st_size > LOG_MAX_BYTES
    fh = path.open("w+" if big else "a+", encoding="utf-8")
    fh.seek(0, 2)
    return fh


def _tail(stderr: TextIO | None, start: int) -> str:
    """What the server wrote to stderr since ``start``, its end, on one line."""
    if stderr is None or stderr.closed:
        return ""
    try:
        stderr.flush()
        end = stderr.seek(0, 2)
        stderr.seek(max(start, end - 4 * LOG_TAIL))
        text = stderr.read()
    except (OSError, ValueError):
        return ""
    return " ".join(text.split())[-LOG_TAIL:]
