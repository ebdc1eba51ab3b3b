"""Run contexts for tests: each states its tier and kind, as every run must."""

from __future__ import annotations

from typing import Any

from agent.context import AgentDeps, RunContext


def owner_ctx(deps: AgentDeps, **fields: Any) -> RunContext:
    """The owner chatting in the terminal (unless ``fields`` say otherwise)."""
    base: dict[str, Any] = {
        "tier": "owner",
        "kind": "chat",
        "channel": "console",
        "chat_id": "owner",
        "sender": "owner",
        "conversation_key": "console:owner",
    }
    return RunContext(deps=deps, **{**base, **fields})


def contact_ctx(deps: AgentDeps, **fields: Any) -> RunContext:
    """A WhatsApp contact with read permission."""
    base: dict[str, Any] = {
        "tier": "contact",
        "kind": "chat",
        "channel": "whatsapp",
        "chat_id": "+14155550123",
        "sender": "+14155550123",
        "conversation_key": "whatsapp:+14155550123",
    }
    return RunContext(deps=deps, **{**base, **fields})
