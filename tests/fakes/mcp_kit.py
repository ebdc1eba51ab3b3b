"""Running the fake MCP server (tests/fakes/mcp_server.py) for a test: over stdio as a
child of the manager, or over streamable HTTP as a process on a loopback port; a
``Gate`` holds a server's start until the test opens it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.tools.mcp.config import HttpServer, StdioServer
from tests.waiting import WATCHDOG

SERVER_SCRIPT = str(Path(__file__).with_name("mcp_server.py"))


def stdio_server(
    name: str,
    effects: Path | None = None,
    extra: int = 0,
    gate: Gate | None = None,
    *,
    trust_read: bool = False,
    hostile: bool = False,
) -> StdioServer:
    """The fake server's config for the manager to start over stdio (held at ``gate``;
    ``trust_read``: as ``"trust": "read"`` in the servers file; ``hostile``: with
    ``order_status``, whose result breaks its own schema)."""
    args = [SERVER_SCRIPT, "stdio", "--name", name, "--extra", str(extra)]
    if effects is not None:
        args += ["--effects", str(effects)]
    if gate is not None:
        args += ["--gate", str(gate.port)]
    if hostile:
        args.append("--hostile")
    return StdioServer(name=name, command=sys.executable, args=tuple(args), trust_read=trust_read)


class Gate:
    """A loopback port a fake server started with ``--gate`` reports to before it serves.

    ``reached`` is set when the server is waiting there; ``open()`` lets it go on.
    Closed unopened, the server goes on too (if it still runs)."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self._go = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    def open(self) -> None:
        self._go.set()

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readline()
            self.reached.set()
            await self._go.wait()
            writer.write(b"go\n")
            await writer.drain()
        except OSError:
            pass  # the server process is gone
        finally:
            writer.close()

    async def __aenter__(self) -> Gate:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._go.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def our_server_processes() -> list[int]:
    """Children of this test process running the fake MCP server over stdio (Linux)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"mcp_server.py\x00stdio" in cmd:
            found.append(int(pid))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class HttpProcess:
    """A fake server process over streamable HTTP; ``kill`` and ``restart`` it at will."""

    name: str
    port: int
    effects: Path | None
    extra: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def config(self) -> HttpServer:
        return HttpServer(name=self.name, url=self.url)

    def _spawn(self) -> subprocess.Popen[bytes]:
        args = [SERVER_SCRIPT, "http", "--port", str(self.port), "--name", self.name]
        args += ["--extra", str(self.extra)]
        if self.effects is not None:
            args += ["--effects", str(self.effects)]
        return subprocess.Popen(
            [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    async def start(self) -> None:
        """Start the process; return once it listens (fail if it does not within the
        watchdog: a hang, not a slow machine)."""
        self.process = self._spawn()
        deadline = asyncio.get_running_loop().time() + WATCHDOG
        while asyncio.get_running_loop().time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the fake MCP server exited ({self.process.returncode})")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return
        raise RuntimeError(f"the fake MCP server did not listen within {WATCHDOG:g} seconds")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


@asynccontextmanager
async def http_server(
    name: str, effects: Path | None = None, extra: int = 0
) -> AsyncIterator[HttpProcess]:
    server = HttpProcess(name, free_port(), effects, extra)
    await server.start()
    try:
        yield server
    finally:
        server.kill()
