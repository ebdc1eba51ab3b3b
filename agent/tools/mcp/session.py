"""The MCP SDK's side of ``agent.tools.mcp.client``: one connection, its tools, one call.

Imported only when a server is configured: the SDK takes over a second to import.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import httpx2
from anyio import CancelScope
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

from agent.tools.mcp import McpTool, describe
from agent.tools.mcp.config import ServerConfig, StdioServer

__all__ = ["CancelScope", "alive", "call", "list_tools", "open_session"]
MAX_PAGES = 50
"""A server that keeps paging its tool list is cut off here."""


def _http_client(headers: Mapping[str, str]) -> httpx2.AsyncClient:
    """The HTTP client the MCP SDK would make for itself (30 s to connect, write and
    wait for a connection; 5 minutes to read, as a server may hold a stream open;
    redirects left to the SDK, which follows them only within the server's origin),
    with the server's configured headers."""
    return httpx2.AsyncClient(headers=dict(headers), timeout=httpx2.Timeout(30.0, read=300.0))


@asynccontextmanager
async def open_session(config: ServerConfig, stderr: TextIO | None) -> AsyncIterator[ClientSession]:
    """A started and initialised session; the server process (stdio) ends with it."""
    if isinstance(config, StdioServer):
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env), cwd=config.cwd
        )
        transport = stdio_client(params, errlog=stderr) if stderr else stdio_client(params)
        async with transport as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    async with (
        _http_client(config.headers) as client,
        streamable_http_client(config.url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def list_tools(session: ClientSession, server: str, trusted: bool = False) -> list[McpTool]:
    """The server's tools (at most ``MAX_PAGES`` pages); ``trusted``: the owner trusts
    it for reads (``ServerConfig.trust_read``)."""
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return [
        McpTool(
            server,
            t.name,
            t.description or t.title or "",
            dict(t.input_schema),
            read_only=bool(t.annotations is not None and t.annotations.read_only_hint),
            trusted=trusted,
        )
        for t in tools
    ]


async def alive(session: ClientSession, timeout: float) -> bool:  # noqa: ASYNC109
    """False once the connection is gone; a server too busy to answer a ping is alive."""
    try:
        with anyio.fail_after(timeout):
            await session.send_ping()
    except TimeoutError:
        return True
    except MCPError as exc:
        return exc.code != CONNECTION_CLOSED
    except Exception:
        return False
    return True


async def call(
    session: ClientSession, server: str, tool: str, arguments: Mapping[str, Any], limit: float
) -> tuple[dict[str, Any], bool]:
    """The tool's answer for the model, and whether the connection was lost.

    ``{"tool_error": ...}`` holds what the server said went wrong (its words), or what
    the SDK refused in its answer (a result that breaks the tool's ``outputSchema``: the
    message quotes the result, so it is the server's words too); ``{"error": ...}`` what
    we saw go wrong (a timeout, the connection lost)."""
    slow = {"error": f"{server}__{tool} did not answer within {limit:g} seconds"}
    try:
        with anyio.fail_after(limit + 1):
            result = await session.call_tool(tool, dict(arguments), read_timeout_seconds=limit)
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            return {"error": f"MCP server {server!r} stopped during the call to {tool!r}"}, True
        if exc.code == REQUEST_TIMEOUT:
            return slow, False
        return {"tool_error": exc.message or f"error {exc.code}"}, False
    except TimeoutError:
        return slow, False
    except (RuntimeError, ValueError) as exc:  # the SDK refused the answer; it may quote it
        return {"tool_error": f"the answer was refused: {describe(exc)}"}, False
    except Exception as exc:  # a transport failure must not escape to the model loop
        # Its message may quote what the server sent: the server's words, not ours.
        return {"tool_error": f"the call broke off: {describe(exc)}"}, True
    return _result(result), False


def _result(result: CallToolResult) -> dict[str, Any]:
    parts = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        else:
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{block.type}{' ' + mime if mime else ''} omitted]")
    text = "\n".join(parts)
    if result.is_error:
        return {"tool_error": text or "the tool reported an error"}
    if not text and result.structured_content is not None:
        return {"structured": result.structured_content}
    return {"content": text}
