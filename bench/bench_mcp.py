"""MCP servers through the real SDK (``agent.tools.mcp``), timed: the figures the MCP
tests used to assert, kept here where a slow machine cannot fail them.

Printed, each the median of ``--runs``: how long ``start(wait=False)`` holds the caller,
start to connected for a stdio server and for one over streamable HTTP, one ``echo``
call, a call cut at its 0.5 s timeout (a tool that sleeps 600 s), and a start whose
only server never answers (start timeout 2 s).

    python bench/bench_mcp.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.tools.mcp import session  # noqa: E402, F401  (the SDK loaded: timings are the servers')
from agent.tools.mcp.client import McpServers  # noqa: E402
from agent.tools.mcp.config import ServerConfig, StdioServer  # noqa: E402
from tests.fakes.mcp_kit import http_server, stdio_server  # noqa: E402
from tests.waiting import until  # noqa: E402


async def timed(step: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await step()
    return time.perf_counter() - began


async def connected_after(servers: McpServers, name: str) -> float:
    """Seconds from now until ``name`` is connected."""
    began = time.perf_counter()
    await until(lambda: name in servers.connected(), f"{name} connected", within=120)
    return time.perf_counter() - began


async def one_run(http: ServerConfig) -> dict[str, float]:
    figures: dict[str, float] = {}
    servers = McpServers([stdio_server("local"), http], start_timeout=30.0)
    try:
        figures["start(wait=False) returns"] = await timed(lambda: servers.start(wait=False))
        stdio, over_http = await asyncio.gather(
            connected_after(servers, "local"), connected_after(servers, http.name)
        )
        figures["stdio: start to connected"] = stdio
        figures["http: start to connected"] = over_http
        figures["echo call (stdio)"] = await timed(
            lambda: servers.call("local", "echo", {"text": "x"})
        )
        figures["echo call (http)"] = await timed(
            lambda: servers.call(http.name, "echo", {"text": "x"})
        )
        figures["call cut at its 0.5 s timeout"] = await timed(
            lambda: servers.call("local", "slow", {"seconds": 600}, timeout=0.5)
        )
    finally:
        await servers.stop()
    silent = StdioServer("silent", sys.executable, ("-c", "import time; time.sleep(60)"))
    stuck = McpServers([silent], start_timeout=2.0)
    try:
        figures["start, server never answers (2 s timeout)"] = await timed(stuck.start)
    finally:
        await stuck.stop()
    return figures


async def main(runs: int) -> None:
    results: dict[str, list[float]] = {}
    async with http_server("web") as web:
        for _ in range(runs):
            for name, seconds in (await one_run(web.config())).items():
                results.setdefault(name, []).append(seconds)
    width = max(map(len, results))
    for name, values in results.items():
        low, high = min(values), max(values)
        print(
            f"{name:<{width}}  median {statistics.median(values) * 1000:8.1f} ms"
            f"  (runs {low * 1000:.1f}-{high * 1000:.1f})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args().runs))
