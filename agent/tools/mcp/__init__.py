"""MCP servers (``MCP_CONFIG``) and their tools for the agent.

``config`` reads the servers file, ``client`` keeps each server connected, ``session``
is the SDK's side of one connection (imported only when a server is configured: the
SDK takes over a second to import), ``tools`` offers the servers' tools to the model.
Here: what the client and the model-facing tools share, a server's tool as it
describes itself and one line for an SDK failure (no SDK import here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class McpTool:
    """One tool a connected MCP server offers, as the server describes it."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool = False
    """The server marks it ``readOnlyHint``: it changes nothing (by MCP's default a tool
    may change anything). It still sends free text to the server."""
    trusted: bool = False
    """Its server is trusted for reads (``"trust": "read"``): when read-only, it stays
    free after outside text (``agent.tools.held``); otherwise every call waits then."""

    @property
    def free_after_outside(self) -> bool:
        """Whether a call stays free once a run has read outside text: a read-only tool
        of a server the owner trusts with what the run read."""
        return self.read_only and self.trusted


def describe(exc: BaseException) -> str:
    """One line for an exception, looking inside the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    message = getattr(exc, "message", None)  # the SDK's MCPError
    if isinstance(message, str) and message:
        return message
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "..."
