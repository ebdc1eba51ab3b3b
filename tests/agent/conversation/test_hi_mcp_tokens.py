"""A plain "hi" from the owner with every owner tool and two MCP servers of ten tools
each: past ``MCP_TOOL_TOKEN_BUDGET`` they cost two tools (``mcp_find_tools``,
``mcp_call``), and the request stays under 3,300 tokens. Offered directly, the same
tools would cost far more (printed with ``-s``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agent.tools.mcp.client import McpServers
from tests.agent.conversation.test_hi_tokens import OWNER_TOOLS, hi_tokens, owner_app
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.mcp_kit import http_server, stdio_server

HI_WITH_MCP_BUDGET = 3_300  # 3,000 before the prompt said what is within reach (hi_tokens)


async def test_hi_with_two_mcp_servers_stays_under_budget(app_db: AppDb, tmp_path: Path) -> None:
    async with (
        http_server("web", extra=4) as web,
        owner_app(app_db, tmp_path) as (app, model),
    ):
        manager = McpServers([stdio_server("files", extra=4), web.config()], start_timeout=20)
        # The app's services with these servers, then with a budget that fits them all.
        deps = dataclasses.replace(app.deps, mcp=manager)
        budget = {"mcp_tool_token_budget": 100_000}
        wider = dataclasses.replace(deps, settings=deps.settings.model_copy(update=budget))
        await manager.start()
        try:
            assert [
                len([t for t in manager.tools() if t.server == s]) for s in ("files", "web")
            ] == [10, 10]
            await app.agent.respond("hi", owner_ctx(deps))
            await app.agent.respond("hi", owner_ctx(wider))
        finally:
            await deps.usage.close()
            await wider.usage.close()
            await manager.stop()
    found, direct = model.requests[0], model.requests[1]
    assert set(found.tool_names) >= OWNER_TOOLS | {"mcp_find_tools", "mcp_call"}
    assert sum("__" in n for n in direct.tool_names) == 20
    tokens, direct_tokens = hi_tokens(found), hi_tokens(direct)
    print(f"\nhi with 2x10 MCP tools: find/call {tokens} tokens, direct {direct_tokens} tokens")
    assert tokens < HI_WITH_MCP_BUDGET, tokens
    assert direct_tokens > tokens
