"""The MCP servers file (``MCP_CONFIG``): the common ``mcpServers`` format.

``{"mcpServers": {"<name>": {"command": ..., "args": [...], "env": {...}}}}`` runs a
server over stdio; ``{"url": ..., "headers": {...}}`` connects over streamable HTTP.
``${VAR}`` in a command, argument, env value, URL or header is taken from the
environment or ``.env`` (the environment wins), so secrets can stay out of the file.
Either kind may add ``"trust": "read"``: the owner trusts the server with what a run
has read, so its read-only tools stay callable after outside text (by default every
call to a server waits for the owner then: it sends free text to a third party).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import Settings, check_http_url, install_command, installed

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,30}")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_STDIO_KEYS = {"command", "args", "env", "cwd"}
_HTTP_KEYS = {"url", "headers"}
_COMMON_KEYS = {"type", "disabled", "description", "trust"}
TRUST_LEVELS = ("read",)


class McpConfigError(Exception):
    """The MCP servers file is wrong; the message names the file, server and field.

    ``server`` is the server it is about (None: the file as a whole); ``variable`` the
    ``${VAR}`` that is not set, when that is the problem."""

    def __init__(
        self, message: str, *, server: str | None = None, variable: str | None = None
    ) -> None:
        super().__init__(message)
        self.server = server
        self.variable = variable


class McpSdkMissing(McpConfigError):
    """Servers are configured but the MCP SDK (the ``mcp`` extra) is not installed."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path} names MCP servers, but the MCP SDK is not installed: "
            f"{install_command('mcp')} (scripts/run installs it when the file exists)"
        )


@dataclass(frozen=True)
class StdioServer:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    trust_read: bool = False
    """``"trust": "read"``: its read-only tools stay free after outside text."""

    @property
    def transport(self) -> str:
        return "stdio"


@dataclass(frozen=True)
class HttpServer:
    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    trust_read: bool = False
    """``"trust": "read"``: its read-only tools stay free after outside text."""

    @property
    def transport(self) -> str:
        return "http"


ServerConfig = StdioServer | HttpServer


def mcp_config_path(settings: Settings) -> Path | None:
    """``MCP_CONFIG`` if set, else ``DATA_DIR/mcp.json`` when that file exists."""
    if settings.mcp_config is not None:
        return settings.mcp_config
    default = settings.data_dir / "mcp.json"
    return default if default.is_file() else None


@dataclass(frozen=True)
class McpSurvey:
    """The servers file read server by server (``doctor``): the servers that are right,
    and every problem, each naming its server."""

    path: Path | None
    servers: list[ServerConfig]
    problems: list[McpConfigError]


def load_mcp_config(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> list[ServerConfig]:
    """The configured servers (none without a file); ``McpConfigError`` (the first
    problem) when it is wrong."""
    path = mcp_config_path(settings)
    if path is None:
        return []
    if not installed("mcp"):
        raise McpSdkMissing(path)
    text = _read(path)
    return parse_mcp_config(text, str(path), _environment() if environ is None else environ)


def survey_mcp_config(settings: Settings, environ: Mapping[str, str] | None = None) -> McpSurvey:
    """Every server of the file and every problem, instead of stopping at the first."""
    path = mcp_config_path(settings)
    if path is None:
        return McpSurvey(None, [], [])
    if not installed("mcp"):
        return McpSurvey(path, [], [McpSdkMissing(path)])
    try:
        servers, problems = _parse_all(
            _read(path), str(path), _environment() if environ is None else environ
        )
    except McpConfigError as exc:
        return McpSurvey(path, [], [exc])
    return McpSurvey(path, servers, problems)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise McpConfigError(f"MCP_CONFIG: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"MCP_CONFIG: cannot read {path} ({exc})") from None


def _environment() -> dict[str, str]:
    """The process environment over ``.env``, as the settings themselves are read."""
    from dotenv import dotenv_values

    dotenv = Path(".env")
    values = dotenv_values(dotenv) if dotenv.is_file() else {}
    return {**{k: v for k, v in values.items() if v is not None}, **os.environ}


def parse_mcp_config(
    text: str, source: str = "MCP_CONFIG", environ: Mapping[str, str] | None = None
) -> list[ServerConfig]:
    servers, problems = _parse_all(text, source, os.environ if environ is None else environ)
    if problems:
        raise problems[0]
    return servers


def _parse_all(
    text: str, source: str, env: Mapping[str, str]
) -> tuple[list[ServerConfig], list[McpConfigError]]:
    """The servers that are right and the problems of the others, in the file's order;
    raises when the file as a whole is wrong."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("mcpServers"), dict):
        raise McpConfigError(f'{source}: must be an object with "mcpServers": {{name: server}}')
    servers: list[ServerConfig] = []
    problems: list[McpConfigError] = []
    for name, entry in doc["mcpServers"].items():
        try:
            server = _parse_server(name, entry, f"{source}: server {name!r}", env)
        except McpConfigError as exc:
            exc.server = name
            problems.append(exc)
            continue
        if server is not None:
            servers.append(server)
    return servers, problems


def _parse_server(
    name: str, entry: object, where: str, env: Mapping[str, str]
) -> ServerConfig | None:
    if not SERVER_NAME.fullmatch(name) or "__" in name:
        raise McpConfigError(
            f"{where}: the name must be 1-30 letters, digits, '_' or '-' without '__' "
            "(its tools are offered as <server>__<tool>)"
        )
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where}: must be an object with a command or a url")
    if entry.get("disabled") is True:
        return None
    kind = entry.get("type")
    if kind == "sse":
        raise McpConfigError(f"{where}: SSE servers are not supported; use streamable HTTP")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(
            f'{where}: needs exactly one of "command" (stdio) or "url" (streamable HTTP)'
        )
    allowed = (_STDIO_KEYS if has_command else _HTTP_KEYS) | _COMMON_KEYS
    for key in entry:
        if key not in allowed and key in (_STDIO_KEYS | _HTTP_KEYS):
            raise McpConfigError(
                f'{where}: "{key}" does not go with ' + ('"command"' if has_command else '"url"')
            )
    trust = entry.get("trust")
    if trust is not None and trust not in TRUST_LEVELS:
        shown = repr(trust) if len(repr(trust)) <= 40 else repr(trust)[:39] + "…"
        raise McpConfigError(
            f'{where}: trust must be "read" (its read-only tools stay callable after '
            f"outside text) or left out (every call waits for the owner then); got {shown}"
        )
    trust_read = trust == "read"
    if has_command:
        command = _text(entry["command"], f"{where}: command", env)
        if not command.strip():
            raise McpConfigError(f"{where}: command is empty")
        args = entry.get("args", [])
        if not isinstance(args, list):
            raise McpConfigError(f"{where}: args must be a list of strings")
        cwd = entry.get("cwd")
        return StdioServer(
            name=name,
            command=command,
            args=tuple(_text(a, f"{where}: args[{i}]", env) for i, a in enumerate(args)),
            env=_strings(entry.get("env", {}), f"{where}: env", env),
            cwd=None if cwd is None else _text(cwd, f"{where}: cwd", env),
            trust_read=trust_read,
        )
    url = _text(entry["url"], f"{where}: url", env)
    try:
        check_http_url(url)
    except ValueError as exc:
        raise McpConfigError(f"{where}: url {exc}") from None
    return HttpServer(
        name=name,
        url=url,
        headers=_strings(entry.get("headers", {}), f"{where}: headers", env),
        trust_read=trust_read,
    )


def _strings(value: object, where: str, env: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise McpConfigError(f"{where} must be an object of strings")
    return {str(k): _text(v, f"{where}.{k}", env) for k, v in value.items()}


def _text(value: Any, where: str, env: Mapping[str, str]) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise McpConfigError(f"{where} must be a string")

    def expand(match: re.Match[str]) -> str:
        var = match.group(1)
        if var not in env:
            raise McpConfigError(
                f"{where} uses ${{{var}}}, which is not set in the environment", variable=var
            )
        return env[var]

    return _VAR.sub(expand, str(value))
