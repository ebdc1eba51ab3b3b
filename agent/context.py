"""Per-request context: who is asking, where the answer goes, and the shared services.

Per-message state travels in ``RunContext`` and nowhere else, so concurrent
conversations never see each other's state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.config import Settings
from storage.repos import ConversationRepo, MessageRepo, SystemInstructionRepo

Tier = Literal["owner", "contact"]
RunKind = Literal["chat", "cron", "pulse"]
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class AgentDeps:
    """Long-lived services every request shares; built once by the composition root."""

    settings: Settings
    db: AsyncDatabase[dict[str, Any]]
    clock: Clock = system_clock
    http: aiohttp.ClientSession | None = None
    instructions: SystemInstructionRepo = field(init=False)
    conversations: ConversationRepo = field(init=False)
    messages: MessageRepo = field(init=False)
    services: dict[str, Any] = field(default_factory=dict)
    """Optional services registered by later parts (scheduler, alerts, outbound senders),
    looked up by the tools that need them."""

    def __post_init__(self) -> None:
        self.instructions = SystemInstructionRepo(self.db)
        self.conversations = ConversationRepo(self.db)
        self.messages = MessageRepo(self.db)


@dataclass
class RunContext:
    deps: AgentDeps
    tier: Tier = "owner"
    kind: RunKind = "chat"
    channel: str = "console"
    chat_id: str = "owner"
    sender: str = "owner"
    conversation_key: str = "console:owner"
    extra: dict[str, Any] = field(default_factory=dict)
    """Run-specific facts (the alert a reply refers to, the cron job being run...)."""

    @property
    def now(self) -> datetime:
        return self.deps.clock()
