"""Run contexts for tests: each states its tier and kind, as every run must."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.registry import reach
from agent.config import Settings
from agent.context import AgentDeps, RunContext
from agent.owner import OwnerSettings
from agent.reach import Owners
from channels.delivery.outbox import Outbox
from channels.types import Channel
from runtime.clock import Clock, utcnow


def agent_deps(
    settings: Settings,
    db: AsyncDatabase[dict[str, Any]],
    http: aiohttp.ClientSession,
    *,
    clock: Clock = utcnow,
    channels: Mapping[str, Channel] | None = None,
    **services: Any,
) -> AgentDeps:
    """A run's services without an app: its outbox stores what the agent sends, and,
    not started, sends nothing; the owner's settings are the defaults until loaded
    (``services``: ``mcp``, ``images``...)."""
    chans = dict(channels or {})
    return AgentDeps(
        settings=settings,
        db=db,
        http=http,
        outbox=Outbox(db, chans, clock),
        owner=OwnerSettings(db, clock, settings.timezone),
        clock=clock,
        channels=chans,
        reach=reach(Owners(settings), chans),
        **services,
    )


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
