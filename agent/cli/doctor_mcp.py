"""``doctor``'s MCP lines: the servers file read server by server, each command looked
up, then each server started (within the start timeout, at most ``START_LIMIT``),
listed and stopped again.

Every problem is a ``[FAIL]`` line naming its server (or the file) with a ``next:``
line saying what to fix, and fails ``doctor``: the agent runs without the servers, but
the setup the owner wrote is broken. No servers file is not a problem.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from agent.config import Settings
from agent.tools.mcp.client import McpServers, ServerStatus
from agent.tools.mcp.config import (
    HttpServer,
    McpConfigError,
    ServerConfig,
    StdioServer,
    survey_mcp_config,
)

START_LIMIT = 25.0
"""The longest doctor waits for a server to start, whatever MCP_START_TIMEOUT_SECONDS
says: doctor answers within a minute."""
STDERR_MARK = "; its stderr ends: "


@dataclass(frozen=True)
class McpCheck:
    """One line of the report, as ``doctor`` prints it, and what to do about it."""

    name: str
    ok: bool
    detail: str
    fatal: bool = False
    step: str | None = None


async def check_mcp(settings: Settings) -> list[McpCheck]:
    survey = survey_mcp_config(settings)
    path = survey.path
    if path is None:
        return [McpCheck("mcp", False, "no servers (MCP_CONFIG unset and no DATA_DIR/mcp.json)")]
    whole = [p for p in survey.problems if p.server is None]
    if whole:  # unreadable, not JSON, not an "mcpServers" object
        problem = str(whole[0])
        return [McpCheck("mcp", False, problem, True, f"fix the MCP servers file: {problem}")]
    count = len(survey.servers) + len(survey.problems)
    checks = [_summary(path, count, len(survey.problems))]
    checks += [_config_problem(path, p) for p in survey.problems]
    startable: list[ServerConfig] = []
    for config in survey.servers:
        if isinstance(config, StdioServer) and _find_command(config) is None:
            checks.append(_missing_command(path, config))
        else:
            startable.append(config)
    if startable:
        log_dir = settings.data_dir / "mcp-logs"
        found = await _start(
            startable, min(settings.mcp_start_timeout_seconds, START_LIMIT), log_dir
        )
        by_name = {c.name: c for c in startable}
        checks += [_started(path, by_name[s.name], s, log_dir) for s in found]
    return checks


def _summary(path: Path, count: int, wrong: int) -> McpCheck:
    if not wrong:
        return McpCheck("mcp", True, f"{count} server(s) in {path}")
    return McpCheck(
        "mcp",
        False,
        f"{count} server(s) in {path}; while {wrong} of them is wrong, none starts",
        fatal=True,
    )


def _config_problem(path: Path, problem: McpConfigError) -> McpCheck:
    name = problem.server or "?"
    detail = str(problem).removeprefix(f"{path}: server {name!r}: ")
    if problem.variable is not None:
        step = (
            f"set {problem.variable} (in the environment or .env): "
            f"MCP server {name} uses ${{{problem.variable}}}"
        )
    else:
        step = f"fix MCP server {name} in {path}: {detail}"
    return McpCheck(f"mcp {name}", False, detail, True, step)


def _find_command(config: StdioServer) -> str | None:
    """Where the server's command is, looked up as it would be started (its own PATH
    first, when its env sets one)."""
    search = config.env.get("PATH", os.environ.get("PATH", os.defpath))
    if config.cwd and os.sep in config.command and not os.path.isabs(config.command):
        return shutil.which(os.path.join(config.cwd, config.command))
    return shutil.which(config.command, path=search)


def _missing_command(path: Path, config: StdioServer) -> McpCheck:
    return McpCheck(
        f"mcp {config.name}",
        False,
        f"stdio: command not found: {config.command}",
        fatal=True,
        step=f'install {config.command}, or put its full path in the "command" of MCP '
        f"server {config.name} in {path}",
    )


async def _start(configs: list[ServerConfig], timeout: float, log_dir: Path) -> list[ServerStatus]:  # noqa: ASYNC109
    servers = McpServers(configs, start_timeout=timeout, log_dir=log_dir)
    try:
        await servers.start()
        return servers.status()
    finally:
        await servers.stop()


def _started(path: Path, config: ServerConfig, status: ServerStatus, log_dir: Path) -> McpCheck:
    name = f"mcp {status.name}"
    if status.state == "connected":
        return McpCheck(name, True, f"{status.transport}: connected, {status.tools} tools")
    error = status.error or f"still {status.state}"
    why = error.split(STDERR_MARK, 1)[0]
    if isinstance(config, HttpServer):
        step = (
            f"MCP server {status.name} does not answer at {config.url} ({why}): check that "
            f"it runs, and its url and headers in {path}"
        )
    else:
        step = (
            f"MCP server {status.name} does not start ({why}): see what it wrote in "
            f"{log_dir / (status.name + '.log')}"
        )
    return McpCheck(name, False, f"{status.transport}: {error}", True, step)
