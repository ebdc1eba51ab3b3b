"""``doctor``'s MCP lines: the servers file, then each server started (with the start
timeout), listed and stopped again. Never fatal: the agent runs without them."""

from __future__ import annotations

from agent.config import Settings
from agent.tools.mcp_client import McpServers
from agent.tools.mcp_config import McpConfigError, load_mcp_config, mcp_config_path

McpCheck = tuple[str, bool, str]
"""(name, ok, detail), as ``doctor`` prints it."""


async def check_mcp(settings: Settings) -> list[McpCheck]:
    try:
        configs = load_mcp_config(settings)
    except McpConfigError as exc:
        return [("mcp", False, str(exc))]
    if not configs:
        return [("mcp", False, "no servers (MCP_CONFIG unset and no DATA_DIR/mcp.json)")]
    servers = McpServers(
        configs,
        start_timeout=settings.mcp_start_timeout_seconds,
        log_dir=settings.data_dir / "mcp-logs",
    )
    try:
        await servers.start()
        found = servers.status()
    finally:
        await servers.stop()
    checks: list[McpCheck] = [
        ("mcp", True, f"{len(configs)} server(s) in {mcp_config_path(settings)}")
    ]
    for status in found:
        name = f"mcp {status.name}"
        if status.state == "connected":
            checks.append((name, True, f"{status.transport}: connected, {status.tools} tools"))
        else:
            why = status.error or f"still {status.state}"
            checks.append((name, False, f"{status.transport}: {why}"))
    return checks
