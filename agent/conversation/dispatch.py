"""From an inbound message to replies: who is speaking, commands, then the agent.

Unknown senders never reach the model (no tokens spent): they are logged and
counted, and a Telegram stranger gets one polite refusal a day at most. A button press
by anyone but the owner is refused in its answer (``agent.conversation.buttons``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from agent.context import AgentDeps, RunContext, Tier
from agent.conversation.agent import Agent, AgentReply, apology
from agent.conversation.buttons import is_press, refuse_press
from agent.conversation.commands import COMMAND_HELP, EXAMPLES
from agent.conversation.pairing import Pairing
from agent.conversation.prompt import mark_untrusted
from channels.delivery.envelope import Envelope
from channels.registry import ChannelName
from channels.types import HandlingFailed, InboundMessage, Reply
from storage import collections as c
from storage.repos.contacts import ContactLog
from storage.repos.inbox import arrivals_since

log = logging.getLogger(__name__)

REFUSAL = (
    "Hello! This is a private assistant and only answers its owner. Your message was not read."
)


def refusal(sender_id: str) -> str:
    """The refusal, naming the id that ``OWNER_TELEGRAM_IDS`` would need."""
    return f"{REFUSAL} Your Telegram user id is {sender_id}."


REFUSAL_EVERY = timedelta(days=1)
BROKEN = "something went wrong on my side"
"""The reason given to the sender when handling failed for a reason of our own."""
RATE_WINDOW = timedelta(minutes=1)
SLOW_DOWN = (
    "You are sending messages faster than I can answer them. I will read again in a "
    "minute; there is no need to repeat anything."
)


@dataclass(frozen=True)
class Trust:
    """Who a message is from, as a resolver decided it when the message is handled."""

    tier: Tier
    can_reply: bool = True


OWNER = Trust("owner")

Command = Callable[[InboundMessage, RunContext], Awaitable[list[Reply]]]
TierResolver = Callable[[InboundMessage], Awaitable[Trust | None]]
Interceptor = Callable[[InboundMessage, RunContext], Awaitable[list[Reply] | None] | None]
"""An owner's message tried before the agent: replies, or None to pass it on. An
interceptor that can tell at once that a message is not for it returns None itself,
not a coroutine: an everyday message then waits in no interceptor (no task switch, no
database read) on its way to the agent."""


@dataclass(frozen=True, eq=False)
class Dispatcher:
    """Built once, with every resolver, command and interceptor of the app."""

    deps: AgentDeps
    agent: Agent
    resolvers: Mapping[str, TierResolver] = field(default_factory=dict)
    """Per-channel trust decision; the default knows owners by the channel's rules."""
    commands: Mapping[str, Command] = field(default_factory=dict)
    """The owner's commands; ``/start``, ``/help`` and ``/reset`` unless given."""
    interceptors: tuple[Interceptor, ...] = ()
    """Tried before the agent (alert directives); the first non-None answer wins."""
    pairing: Pairing | None = None
    """Telegram pairing while no owner is known; it also keeps paired owners current."""

    def __post_init__(self) -> None:
        # Read-only copies: what the dispatcher knows is fixed when it is built.
        defaults: dict[str, Command] = {
            "/start": self._help,
            "/help": self._help,
            "/reset": self._reset,
        }
        commands = MappingProxyType({**defaults, **self.commands})
        object.__setattr__(self, "commands", commands)
        object.__setattr__(self, "resolvers", MappingProxyType(dict(self.resolvers)))

    def known_owner(self, message: InboundMessage) -> bool:
        """Whether the channel's rules (``agent.reach``) know the sender as the owner
        now, from memory: the everyday message needs no read to be trusted."""
        if message.channel in self.resolvers:
            return False  # the channel's resolver decides (``trust``)
        return self.deps.reach.is_owner(message.channel, message.sender_id, message.meta)

    async def trust(self, message: InboundMessage) -> Trust | None:
        """The channel's resolver decides (contacts), else its rules in the registry
        (``agent.reach``): the owner, or nobody."""
        resolver = self.resolvers.get(message.channel)
        if resolver is not None:
            return await resolver(message)
        reach, meta = self.deps.reach, message.meta
        owner = reach.is_owner(message.channel, message.sender_id, meta)
        if not owner and message.channel == ChannelName.TELEGRAM and self.pairing is not None:
            await self.pairing.refresh()  # `watchkeeper pair` may have run since
            owner = reach.is_owner(message.channel, message.sender_id, meta)
        return OWNER if owner else None

    async def handle(self, envelope: Envelope) -> list[Reply]:
        """The replies to a stored message; its run context is read off the envelope."""
        message = envelope.message
        trust = OWNER if self.known_owner(message) else await self.trust(message)
        pressed = is_press(message)
        if pressed and (trust is None or trust.tier != "owner"):
            return refuse_press(message)  # a button is the owner's: nothing else happens
        if trust is None:
            return await self._stranger(envelope)
        tier = trust.tier
        ctx = RunContext(
            deps=self.deps,
            tier=tier,
            kind="chat",
            channel=message.channel,
            chat_id=message.chat_id,
            sender=message.sender_id,
            conversation_key=message.conversation_key,
            inbox_id=envelope.inbox_id,
            run_id=envelope.inbox_id,
            replay=envelope.replay,
            has_media=envelope.has_media,
            reply_to=message.reply_to,
            can_reply=trust.can_reply,
            owner_words=message.text if tier == "owner" else None,
            transport=MappingProxyType(dict(message.meta)),
        )
        try:
            # A command, an interceptor (alert directives) or else the agent answers.
            command = command_of(message.text) if tier == "owner" and not pressed else ""
            if command in self.commands:
                return await self.commands[command](message, ctx)
            if tier == "owner":
                for intercept in self.interceptors:
                    taken = intercept(message, ctx)
                    if taken is not None and (replies := await taken) is not None:
                        return replies
            if tier == "contact" and await self._too_fast(message):
                return await self._slow_down(message, ctx)
            text = message.text  # its photos and voice notes are fetched as its turn is built
            if tier == "contact":
                text = mark_untrusted(text, message.sender_id, message.sender_name)
            reply = await self.agent.respond(text, ctx)
            log_exchange(message.channel, message.text, reply)
        except HandlingFailed:
            raise
        except Exception as exc:
            # Whatever broke, the sender hears so (when they may be answered) and the
            # message ends as failed: it is not run, and billed, again at a restart.
            log.exception("handling a %s message failed", message.channel)
            replies = [Reply(apology(BROKEN))] if ctx.can_reply else []
            raise HandlingFailed(f"{type(exc).__name__}: {exc}", replies) from exc
        if reply.failed:
            raise HandlingFailed(reply.failure, [Reply(reply.text)] if ctx.can_reply else [])
        if not reply.text.strip():
            return [] if tier == "contact" else [Reply("(done; nothing to add)")]
        if not ctx.can_reply:
            return []
        # A replay reads the stored answer back (Agent.respond) instead of asking again.
        return [Reply(reply.text, replayable=True)]

    async def _stranger(self, envelope: Envelope) -> list[Reply]:
        """Counted by channel, sender, time and size; their words are not kept where the
        model or the pulse could read them (the stored inbox row is emptied)."""
        message, contacts = envelope.message, ContactLog(self.deps.db)
        if envelope.inbox_id is not None:
            await contacts.forget_words(envelope.inbox_id)
        now = self.deps.clock()
        last = await contacts.stranger_seen(
            message.channel, message.sender_id, len(message.text), now
        )
        if message.channel != ChannelName.TELEGRAM:
            log.info("ignored a %s message from an unknown sender", message.channel)
            return []
        if self.deps.reach.address(message.channel) is not None or self.pairing is None:
            # While nobody is owner, the pairing step says what it did with the message.
            log.info(
                "ignored a telegram message from unknown sender id %s (not an owner)",
                _as_int(message.sender_id),
            )
        if self.pairing is not None:  # codes while no owner is known; owner's codes always
            offered = await self.pairing.offer(message)
            if offered is not None:
                return offered
        if last is not None and now - last < REFUSAL_EVERY:
            return []
        await contacts.stranger_refused(message.channel, message.sender_id, now)
        return [Reply(refusal(message.sender_id))]

    async def _too_fast(self, message: InboundMessage) -> bool:
        """More than the per-minute limit from one contact: no model call for the rest."""
        since = self.deps.clock() - RATE_WINDOW
        arrived = await arrivals_since(self.deps.db[c.INBOX], since)
        mine = (message.channel, message.sender_id)
        recent = sum((m.channel, m.sender_id) == mine for m in arrived)
        return recent > self.deps.settings.contact_messages_per_minute

    async def _slow_down(self, message: InboundMessage, ctx: RunContext) -> list[Reply]:
        """One polite notice per window (when replies are allowed), then silence."""
        contacts = ContactLog(self.deps.db)
        now = self.deps.clock()
        if not await contacts.notice_rate(message.channel, message.sender_id, now, RATE_WINDOW):
            return []  # noticed already in this window
        log.info("%s contact over the message rate; no model call", message.channel)
        return [Reply(SLOW_DOWN)] if ctx.can_reply else []

    def help_text(self) -> str:
        lines = [f"{name} - {text}" for name, text in COMMAND_HELP.items() if name in self.commands]
        examples = "\n".join(f'- "{example}"' for example in EXAMPLES)
        return (
            "I'm your Watchkeeper. Just write to me, for example:\n"
            f"{examples}\n\nReply to an alert with ack, snooze 1h or resolve.\n\n"
            "Commands:\n" + "\n".join(lines)
        )

    async def _help(self, message: InboundMessage, ctx: RunContext) -> list[Reply]:
        return [Reply(self.help_text())]

    async def _reset(self, message: InboundMessage, ctx: RunContext) -> list[Reply]:
        await self.deps.conversations.reset(ctx.conversation_key)
        return [Reply("Started a new conversation. Memory is kept.")]


def log_exchange(channel: str, text: str, reply: AgentReply) -> None:
    """One INFO line per exchange: its sizes, tools, tokens and time; never its words."""
    usage = reply.usage
    log.info(
        "exchange: %s, %d chars in, %d out, tools: %s, tokens: %d in (%d cached) + %d out, "
        "%.0f ms%s",
        channel,
        len(text),
        len(reply.text),
        ", ".join(reply.tool_calls) or "none",
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.output_tokens,
        reply.duration_ms,
        ", failed" if reply.failed else "",
    )


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def command_of(text: str) -> str:
    """``/jobs@my_bot run`` -> ``/jobs``; empty when the text is not a command."""
    words = text.split(maxsplit=1)
    if not words or not words[0].startswith("/"):
        return ""
    return words[0].split("@")[0].lower()
