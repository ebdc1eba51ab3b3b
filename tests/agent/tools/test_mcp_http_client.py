"""An HTTP MCP server gets the headers its configuration names, on the client we make
with the MCP SDK's own timeouts (``agent.tools.mcp.session``)."""

from __future__ import annotations

import anyio
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp.shared.exceptions import MCPError

from agent.tools.mcp.config import HttpServer
from agent.tools.mcp.session import open_session


async def test_the_configured_headers_reach_the_server() -> None:
    seen: list[tuple[str, str | None]] = []

    async def refuse(request: web.Request) -> web.Response:
        seen.append((request.method, request.headers.get("Authorization")))
        return web.json_response({"error": "unauthorized"}, status=401)

    app = web.Application()
    app.router.add_route("*", "/mcp", refuse)
    async with TestServer(app, host="127.0.0.1") as server:
        config = HttpServer(
            name="notes",
            url=str(server.make_url("/mcp")),
            headers={"Authorization": "Bearer t0ken"},
        )
        refused = False
        try:
            with anyio.fail_after(30):
                async with open_session(config, None):
                    pass
        except* MCPError:  # the 401, as the SDK reports it
            refused = True
    assert refused
    assert seen and seen[0] == ("POST", "Bearer t0ken")
