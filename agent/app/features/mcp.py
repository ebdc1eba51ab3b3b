"""MCP servers from ``MCP_CONFIG``: started in the background with the app (tools
appear as each server connects), shown in ``/status`` and ``/api/status``, stopped
with the app. A bad file or a server that fails never stops start-up."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agent.app.application import FeatureContext, Parts, Services
from agent.config import Settings
from agent.tools.mcp.config import McpConfigError, load_mcp_config

if TYPE_CHECKING:
    from agent.tools.mcp.client import McpServers, ServerStatus

log = logging.getLogger(__name__)


def build_servers(settings: Settings) -> McpServers | None:
    """The manager for the configured servers (None without any); raises ``McpConfigError``."""
    configs = load_mcp_config(settings)
    if not configs:
        return None
    from agent.tools.mcp.client import McpServers  # loaded only with a server configured

    return McpServers(
        configs,
        start_timeout=settings.mcp_start_timeout_seconds,
        call_timeout=settings.mcp_call_timeout_seconds,
        log_dir=settings.data_dir / "mcp-logs",
    )


async def mcp_feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
    try:
        servers = build_servers(ctx.settings)
    except McpConfigError as exc:
        log.error("mcp: %s (no MCP tools until it is fixed)", exc)
        problem = str(exc)

        async def config_section() -> dict[str, Any]:
            return {"mcp": {"error": problem, "servers": []}}

        yield Parts(status=(config_section,))
        return
    if servers is None:
        yield Parts()
        return

    async def status_section() -> dict[str, Any]:
        return {"mcp": {"servers": [server_json(s) for s in servers.status()]}}

    await servers.start(wait=False)
    log.info("mcp: starting %d server(s)", len(servers.status()))
    yield Parts(status=(status_section,), services=Services(mcp=servers))
    await servers.stop()


def server_json(status: ServerStatus) -> dict[str, Any]:
    return {
        "name": status.name,
        "transport": status.transport,
        "state": status.state,
        "tools": status.tools,
        "error": status.error,
    }


def mcp_status_line(data: dict[str, Any]) -> str | None:
    """``/status``'s line: each server's state (and why it is not connected)."""
    mcp = data.get("mcp")
    if mcp is None:
        return None
    if mcp.get("error"):
        return f"MCP: config error: {mcp['error']}"
    shown = []
    for s in mcp["servers"]:
        if s["state"] == "connected":
            shown.append(f"{s['name']} connected ({s['tools']} tools)")
        else:
            shown.append(f"{s['name']} {s['state']}" + (f" ({s['error']})" if s["error"] else ""))
    return "MCP: " + ", ".join(shown)
