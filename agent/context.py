"""Per-run context: who is asking, where the answer goes, and the shared services.

Per-message state travels in ``RunContext`` and nowhere else, so concurrent
conversations never see each other's state. Its trusted fields are typed and set by
our own code (dispatcher, runner); what a transport reported about a message is kept
apart, read-only, in ``transport``, so no message can set a trusted field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo

import aiohttp
from pymongo.asynchronous.database import AsyncDatabase

from agent.alerts.directives import Resolve
from agent.alerts.router import AlertRouter
from agent.config import Settings
from agent.llm.images import ImageDecoder
from agent.owner import OwnerSettings
from agent.reach import Reach
from agent.spend.budget import TokenBudget, reservation_ttl
from channels.delivery.outbox import Outbox
from channels.types import Channel, OutboundMessage
from runtime.clock import Clock, utcnow
from scheduler.cron.service import CronService
from scheduler.engine import Engine
from scheduler.pulse.store import PulseStore
from storage.recall import Recall
from storage.repos.alert_record import Alert
from storage.repos.conversations import ConversationRepo, MessageRepo, SystemInstructionRepo
from storage.repos.effects import EffectLog
from storage.repos.usage import UsageLog

Tier = Literal["owner", "contact"]
RunKind = Literal["chat", "cron", "pulse"]
NO_META: Mapping[str, Any] = MappingProxyType({})


class McpManager(Protocol):
    """The MCP servers (``agent.tools.mcp.client.McpServers``), as runs see them."""

    def tools(self) -> Sequence[Any]: ...

    def connected(self) -> list[str]: ...

    async def until_settled(self) -> None:
        """Return once the servers still starting have connected or failed (bounded)."""
        ...

    async def call(self, server: str, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``{"content": text}``, ``{"structured": value}``, ``{"tool_error": text}`` (the
        failure the server reported, its words) or ``{"error": text}`` (ours)."""
        ...


@dataclass(frozen=True, eq=False, kw_only=True)
class AgentDeps:
    """Long-lived services every run shares; built once by the composition root, from
    the services the features provide, and never changed after.

    A service whose feature is off (alerts, the scheduler, MCP) is None, and the code
    that needs it says so (a tool tells the model).
    """

    settings: Settings
    db: AsyncDatabase[dict[str, Any]]
    query_db: AsyncDatabase[dict[str, Any]] | None = None
    """Where the model's ``db_query`` runs (``storage.db.Database.queries``); None: ``db``."""
    http: aiohttp.ClientSession
    """The app's HTTP client (web search)."""
    outbox: Outbox
    """Where every message the agent sends goes (``channels.delivery.outbox``)."""
    clock: Clock = utcnow
    channels: Mapping[str, Channel] = field(default_factory=dict)
    """The running channels by name (the composition root's live mapping)."""
    reach: Reach
    """Where the owner is reached, and who the owner is, on each channel (``agent.reach``;
    ``reach.owners``: the settings' owners and those paired in the database)."""
    alerts: AlertRouter | None = None
    cron: CronService | None = None
    pulse: PulseStore | None = None
    scheduler: Engine | None = None
    owner: OwnerSettings
    """The owner's quiet hours, timezone and primary channel (``manage_settings``)."""
    mcp: McpManager | None = None
    """The MCP servers from ``MCP_CONFIG``, when any are configured."""
    images: ImageDecoder = field(default_factory=ImageDecoder)
    """Decodes the photos of every chat, one at a time (``agent.llm.images``)."""
    instructions: SystemInstructionRepo = field(init=False)
    conversations: ConversationRepo = field(init=False)
    messages: MessageRepo = field(init=False)
    effects: EffectLog = field(init=False)
    usage: UsageLog = field(init=False)
    """Tokens per day for the dashboard, written in batches (``agent.spend.budget``)."""
    budget: TokenBudget = field(init=False)
    """``DAILY_TOKEN_BUDGET``, checked before every model call (``agent.spend.budget``)."""
    recall: Recall = field(init=False)
    """The saved facts and past conversations, searchable (``storage.recall``)."""

    def __post_init__(self) -> None:
        # The repositories over ``db``, made with the record (it is frozen after).
        set_field = object.__setattr__
        set_field(self, "effects", EffectLog(self.db))
        set_field(self, "usage", UsageLog(self.db))
        limit, owner = self.settings.daily_token_budget, self.owner
        budget = TokenBudget(
            self.usage, self.db, limit, self.clock, lambda: owner.tz, self.tell,
            max_output=self.settings.max_output_tokens, unnotify=self.untell,
            hold_for=reservation_ttl(self.settings.llm_timeout_seconds),
        )  # fmt: skip
        set_field(self, "budget", budget)
        set_field(self, "instructions", SystemInstructionRepo(self.db))
        set_field(self, "conversations", ConversationRepo(self.db))
        set_field(self, "recall", Recall(self.db, self.clock))
        set_field(self, "messages", MessageRepo(self.db, self.recall.learn))

    @property
    def primary_channel(self) -> str | None:
        """The owner's preferred chat channel (``manage_settings``), if set."""
        return self.owner.current.primary_channel

    async def untell(self, key: str) -> None:
        """The notice ``key`` (``tell``) no longer holds: its alert, if still open, is
        resolved (a chat message stays as sent)."""
        if self.alerts is None:
            return
        alert = await self.alerts.store.by_open_key(key)
        if alert is not None:
            await self.alerts.apply(alert.code, Resolve(), "watchkeeper (budget raised)")

    async def tell(self, title: str, body: str, key: str) -> None:
        """An info notice for the owner: an alert (deduplicated by ``key``), or, with
        alerts off, a message on their chat (sent once per ``key``)."""
        if self.alerts is not None:
            await self.alerts.raise_alert(
                severity="info", title=title, body=body, dedupe_key=key, source="budget"
            )
            return
        target = self.reach.chat(primary=self.primary_channel)
        text = f"ℹ️ {title}\n{body}"
        await self.outbox.enqueue(
            OutboundMessage(
                channel=target.channel, chat_id=target.chat_id, text=text, idempotency_key=key
            )
        )


@dataclass(frozen=True)
class AlertInPlay:
    """The alert a free-text reply is about, and whether the owner named it."""

    alert: Alert
    named_by_owner: bool


@dataclass
class Tally:
    """What one exchange or run has set off so far; shared by copies of its context."""

    sends: int = 0
    untrusted: list[str] = field(default_factory=list)
    """Where the outside text this run has read came from (an MCP tool's result, web
    search results): once there is any, its acting calls wait for the owner
    (``agent.tools.held``)."""
    approved: str | None = None
    """The owner's code when this run carries out actions they approved: nothing in it
    is held again."""


@dataclass(frozen=True)
class RunContext:
    """One run of the agent. ``tier`` and ``kind`` have no default: every run says who
    it is for, because the tier decides which tools it gets."""

    deps: AgentDeps
    tier: Tier
    kind: RunKind
    channel: str
    chat_id: str
    sender: str
    conversation_key: str
    inbox_id: str | None = None
    """The stored inbound message this exchange answers."""
    replay: bool = False
    """An earlier attempt at this message may have answered it already."""
    has_media: bool = True
    """Whether the stored message (or its burst) lists photos or voice notes; False
    spares the look-up (``agent.conversation.media_turn``)."""
    reply_to: str | None = None
    can_reply: bool = True
    """Whether an answer is sent back (a contact without ``can_reply`` gets none)."""
    run_id: str | None = None
    """Stable id of this exchange or run: the inbox id of the message a chat answers,
    the run record of a cron or pulse run. Side effects are keyed by it."""
    job_id: str | None = None
    job_name: str | None = None
    alert: AlertInPlay | None = None
    owner_words: str | None = None
    """The owner's own words that started this run (their chat message, the instruction
    of a job they wrote), or None when the owner's words did not start it (a contact, the
    pulse, a job made from outside text). After outside text such a run may still alert
    the owner, at most at the severity these words name (``agent.tools.alerts``)."""
    transport: Mapping[str, Any] = field(default_factory=lambda: NO_META)
    tally: Tally = field(default_factory=Tally)
    """What the transport said about the message (``is_group``...): untrusted facts."""

    @property
    def now(self) -> datetime:
        return self.deps.clock()

    @property
    def tz(self) -> ZoneInfo:
        """The owner's timezone: every time shown to the model is in it."""
        return self.deps.owner.tz
