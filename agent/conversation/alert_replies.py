"""The owner's replies to alerts, tried before the agent (a dispatcher interceptor).

A reply is matched to an alert by its code (``#12``, ``12a``, ``ack 12``...), by
reply-to (the outbox knows which message carried which alert), else by the latest
alert sent to the owner. Directives are applied without the model and confirmed on
the same channel. A short acknowledgement ("k", "thx", "👍") acks only an alert it
answers: one it replies to, or on SMS/WhatsApp the alert last sent to that chat
within ``RoutingPolicy.short_ack_window``. Words that are also conversation ("ok",
"done", and every job word: "weekly", "resume", "every 2h") change nothing without a
code unless they plainly answer an alert: a reply to it, or within that window with the
alert the last thing sent to the owner on any chat; never an alert already acknowledged
or resolved. A job word about an alert no job raised is the agent's too. Any other
text goes to the agent with the alert attached as context, and the prompt says whether
and how the owner named it (and which words are read as replies, so the agent never
invites one). With no alert in play, the message is not ours: ``None`` hands it to the
agent.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, Literal

from agent.alerts.bulk import bulk_reply
from agent.alerts.directives import (
    REPLY_WORDS_NOTE,
    Ack,
    AckAll,
    Directive,
    Escalate,
    ParsedReply,
    Resolve,
    ResolveAll,
    parse_reply,
)
from agent.alerts.job_directives import apply_cron, apply_pulse, job_id_of
from agent.alerts.lifecycle import ALERT_DIRECTIVES, Outcome
from agent.alerts.policy import local_time, model_field
from agent.alerts.router import AlertRouter
from agent.context import AlertInPlay, RunContext
from agent.conversation.agent import Agent
from channels.registry import ChannelName
from channels.types import HandlingFailed, InboundMessage, Reply
from storage.repos.alert_record import Alert
from storage.repos.sent_alerts import last_sent_alert, last_sent_to, replied_alert

log = logging.getLogger(__name__)
Named = Literal["code", "reply"]
SETTLED = frozenset({"acknowledged", "resolved"})
"""An alert in one of these states is no longer a question an everyday word answers,
except "done" / "fixed" for an acknowledged one: closing it is what they say."""


EVERYDAY_WINDOW = timedelta(hours=24)
"""A message of only an everyday word a directive could be ("weekly", "pause") gets the
latest alert sent this recently as context; other free text only within the policy's
``context_window`` (minutes)."""


@dataclasses.dataclass(frozen=True)
class NamedAlert(AlertInPlay):
    """The alert in play, and how the owner named it (so the prompt can say so)."""

    how: Named | None = None
    also: tuple[str, ...] = ()
    """Other alerts the message names, not attached."""


class AlertReplies:
    def __init__(self, router: AlertRouter, agent: Agent) -> None:
        self._router = router
        self._agent = agent

    def __call__(
        self, message: InboundMessage, ctx: RunContext
    ) -> Coroutine[Any, Any, list[Reply] | None] | None:
        """The answer to an alert reply, or None at once for a message that cannot be
        one: free text naming no alert, replying to nothing, while the store knows no
        alert was sent within the context window (no database read, nothing awaited)."""
        parsed = parse_reply(message.text, now=ctx.now, tz=ctx.tz)
        free = parsed.directive is None and parsed.error is None and parsed.code is None
        if (
            free
            and not (parsed.reserved or parsed.short or parsed.everyday or message.reply_to)
            and self._router.store.none_sent_since(ctx.now - self._router.policy.context_window)
        ):
            return None
        return self._answer(message, ctx, parsed)

    async def _answer(
        self, message: InboundMessage, ctx: RunContext, parsed: ParsedReply
    ) -> list[Reply] | None:
        if parsed.reserved:
            # Carriers answer STOP/START/HELP on SMS themselves: a second answer from us
            # would be noise (or cost). Elsewhere it is ordinary text for the agent.
            return [] if message.channel == ChannelName.SMS else None
        directive = parsed.directive
        button = " button" if message.meta.get("kind") == "button" else ""
        by = f"owner via {message.channel}{button}"  # the dashboard shows how
        if isinstance(directive, AckAll | ResolveAll):
            return [self._reply(await self._bulk(message, ctx, parsed, directive, by))]
        if parsed.short:
            target = await self._short_ack_target(message, ctx)
            if target is not None:
                ack = directive if isinstance(directive, Ack) else Ack()  # "on it, ..."
                outcome = await self._router.apply(target.code, ack, by)
                return [self._reply(_confirmed(outcome, ack), target.code)]
            parsed, directive = ParsedReply(), None  # not a reply to an alert: free text
        plain = await self._plain_target(message, ctx, directive) if parsed.everyday else None
        if parsed.everyday and plain is None:
            # Conversation ("weekly", "resume"), still likely about the last alert.
            parsed, directive = ParsedReply(everyday=True), None
        if plain is not None:
            alert: Alert | None = plain
            how: Named | None = "reply" if message.reply_to else None
        else:
            alert, how = await self._match(message, parsed, ctx)
        if alert is None:
            if parsed.code is not None and (directive is not None or parsed.error):
                return [self._reply(f"There is no alert #{parsed.code}.")]
            return None
        code = alert.code
        if parsed.error is not None:
            return [self._reply(parsed.error, code)]
        if directive is None or (directive.scope == "cron" and job_id_of(alert) is None):
            # Free text, or a schedule word for an alert no job raised ("make this
            # weekly" about a check the agent raised): the agent asks what is meant.
            others = tuple(c for c in (parsed.code, *parsed.more) if c and c != code)
            return await self._ask_agent(message, ctx, NamedAlert(alert, bool(how), how, others))
        if isinstance(directive, Escalate):
            return [self._reply((await self._router.escalate(code, by)).text, code)]
        if isinstance(directive, ALERT_DIRECTIVES):
            outcome = await self._router.apply(code, directive, by)
            return [self._reply(_confirmed(outcome, directive), code)]
        if directive.scope == "cron":
            return [self._reply(await apply_cron(ctx.deps.cron, alert, directive, ctx.now), code)]
        return [self._reply(await apply_pulse(ctx.deps.pulse, directive), code)]

    async def _bulk(
        self,
        message: InboundMessage,
        ctx: RunContext,
        parsed: ParsedReply,
        directive: AckAll | ResolveAll,
        by: str,
    ) -> str:
        """``12aa`` / ``12cc``: every open alert, once the owner sends it again."""
        letters = "aa" if isinstance(directive, AckAll) else "cc"
        words = "ack all" if isinstance(directive, AckAll) else "resolve all"
        form = f"{parsed.code}{letters}" if parsed.code else f"'{words}'"
        chat = f"{message.channel}:{message.chat_id}"
        return await bulk_reply(self._router, directive, chat=chat, form=form, now=ctx.now, by=by)

    async def _short_ack_target(self, message: InboundMessage, ctx: RunContext) -> Alert | None:
        """The alert a "k" / "thx" / "👍" answers: the alert message it replies to (any
        channel that says so, Telegram always), else on SMS/WhatsApp the alert last sent
        to this chat within the window, if nothing was sent there since."""
        window = self._router.policy.short_ack_window
        if window.total_seconds() <= 0:
            return None
        db, store = ctx.deps.db, self._router.store
        if message.reply_to:
            sent = await replied_alert(db, message.channel, message.chat_id, message.reply_to)
            return await store.by_code(sent.code) if sent and sent.is_alert else None
        reach = ctx.deps.reach
        if not reach.delivery(message.channel).unquoted_replies:
            return None
        chats = [message.chat_id, reach.address(message.channel) or ""]
        code = await last_sent_alert(db, message.channel, chats, ctx.now - window)
        return await store.by_code(code) if code else None

    async def _plain_target(
        self, message: InboundMessage, ctx: RunContext, directive: Directive | None
    ) -> Alert | None:
        """The alert an everyday word ("weekly", "resume", "ok") plainly answers: the
        alert it replies to, else the alert that is the last thing sent to the owner on
        any of their chats, within ``short_ack_window`` (a word after the agent's own
        "daily or weekly?" answers the agent). Never one acknowledged or resolved
        (``SETTLED``)."""
        db, store = ctx.deps.db, self._router.store
        code: str | None = None
        if message.reply_to:
            sent = await replied_alert(db, message.channel, message.chat_id, message.reply_to)
            code = sent.code if sent is not None else None
        else:
            window = self._router.policy.short_ack_window
            if window.total_seconds() > 0:
                chats = {(message.channel, message.chat_id)}
                for channel in {*ctx.deps.channels, ChannelName.SMS, message.channel}:
                    address = ctx.deps.reach.address(channel)
                    if address is not None:
                        chats.add((channel, address))
                code = await last_sent_to(db, chats, ctx.now - window)
        alert = await store.by_code(code) if code else None
        if alert is None:
            return None
        status = alert.status
        closing = isinstance(directive, Resolve) and status == "acknowledged"
        return None if status in SETTLED and not closing else alert

    async def _match(
        self, message: InboundMessage, parsed: ParsedReply, ctx: RunContext
    ) -> tuple[Alert | None, Named | None]:
        """The alert this reply is about, and how the owner named it (code, reply-to)."""
        store = self._router.store
        if parsed.code is not None:
            if parsed.directive is not None or parsed.error is not None:
                return await store.by_code(parsed.code), "code"
            for code in (parsed.code, *parsed.more):  # free text: the first that exists
                alert = await store.by_code(code)
                if alert is not None:
                    return alert, "code"
            return None, "code"
        if message.reply_to:
            sent = await replied_alert(
                ctx.deps.db, message.channel, message.chat_id, message.reply_to
            )
            if sent is not None:
                return await store.by_code(sent.code), "reply"
        if parsed.directive is not None or parsed.error is not None:
            return await store.latest_sent(), None
        if parsed.everyday:  # a lone "weekly" or "pause": likely about the last alert
            return await store.latest_sent(ctx.now - EVERYDAY_WINDOW), None
        since = ctx.now - self._router.policy.context_window
        return await store.latest_sent(since), None

    async def _ask_agent(
        self, message: InboundMessage, ctx: RunContext, in_play: NamedAlert
    ) -> list[Reply]:
        """Free text about an alert: the agent answers, knowing which alert it is."""
        about = dataclasses.replace(ctx, alert=in_play)
        reply = await self._agent.respond(message.text, about)
        if reply.failed:
            raise HandlingFailed(reply.failure, [Reply(reply.text)])
        if not reply.text.strip():
            return [Reply("(done; nothing to add)")]
        return [Reply(reply.text)]

    @staticmethod
    def _reply(text: str, code: str | None = None) -> Reply:
        """Confirmations carry the alert code, so a reply to them finds the alert too."""
        return Reply(text, meta={"alert_code": code} if code else {})


def _confirmed(outcome: Outcome, directive: Directive) -> str:
    """The confirmation, saying the owner's note was kept ("#3 resolved — note: it was
    the disk"), or that it was not when nothing changed."""
    note = directive.note if isinstance(directive, Ack | Resolve) else None
    if note is None:
        return outcome.text
    if not outcome.changed:
        return f"{outcome.text} The note was not kept."
    return f"{outcome.text.removesuffix('.')} \u2014 note: {note}"


def reply_words_section(ctx: RunContext) -> str | None:
    """System-prompt text: which whole messages the grammar reads as alert replies, so
    the agent never asks the owner for one of them (registered with the alerts)."""
    return REPLY_WORDS_NOTE


def alert_prompt_section(ctx: RunContext) -> str | None:
    """System-prompt text for a reply about an alert (registered on the agent)."""
    if ctx.alert is None:
        return None
    alert = ctx.alert.alert
    lines = [
        "## The alert this message is about",
        f"#{alert.code} [{alert.severity}] {model_field(alert, 'title')}",
    ]
    # Words from outside (a site's answer, a posted alert) come in untrusted blocks.
    if alert.body:
        lines.append(model_field(alert, "body", 1500))
    if alert.reason:
        lines.append("Reason given: " + model_field(alert, "reason", 1000))
    when = local_time(alert.created_at, ctx.now, ctx.tz)
    lines.append(
        f"Status: {alert.status}; seen {alert.count} time(s); "
        f"raised by {model_field(alert, 'source', 100)} at {when}."
    )
    job = job_id_of(alert)
    if job is not None:
        lines.append(f"Raised by cron job {job}: manage_cronjob changes its schedule.")
    lines.append(_how_named(ctx.alert))
    lines.append(
        "Answer the owner's message in that light. To change the alert use manage_alerts "
        f"with code {alert.code!r}."
    )
    return "\n".join(lines)


def _how_named(in_play: AlertInPlay) -> str:
    """Which alert the owner meant, and how sure that is, in the prompt's words."""
    code = in_play.alert.code
    how = in_play.how if isinstance(in_play, NamedAlert) else None
    also = in_play.also if isinstance(in_play, NamedAlert) else ()
    if not in_play.named_by_owner:
        return (
            "The owner did not name the alert: it is the latest one sent to them, so the "
            "message may be about something else."
        )
    if how == "reply":
        text = f"The owner replied to the message that carried #{code}: this is the alert meant."
    else:
        text = (
            f"The owner named alert #{code} in the message, but it is not a reply the "
            "parser could apply: this is the alert meant, and the rest is yours to handle."
        )
    if also:
        listed = ", ".join(f"#{c}" for c in also)
        text += f" The message also names {listed} (not shown here; list them if it matters)."
    return text
