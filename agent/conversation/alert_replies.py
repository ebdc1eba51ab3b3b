"""The owner's replies to alerts, tried before the agent (a dispatcher interceptor).

A reply is matched to an alert by ``#code``, by Telegram reply-to (the outbox knows
which message carried which alert), else by the latest alert sent to the owner.
Directives are applied without the model and confirmed on the same channel; any
other text goes to the agent with the alert attached as context. With no alert in
play, the message is not ours: ``None`` hands it to the agent as usual.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from agent.alerts.directives import ParsedReply, parse_reply
from agent.alerts.job_directives import apply_cron, apply_pulse
from agent.alerts.lifecycle import ALERT_DIRECTIVES
from agent.alerts.policy import local_time, public
from agent.alerts.router import AlertRouter
from agent.context import AlertInPlay, RunContext
from agent.conversation.agent import Agent
from channels.types import InboundMessage, Reply

log = logging.getLogger(__name__)
Doc = dict[str, Any]


class AlertReplies:
    def __init__(self, router: AlertRouter, agent: Agent) -> None:
        self._router = router
        self._agent = agent

    async def __call__(self, message: InboundMessage, ctx: RunContext) -> list[Reply] | None:
        parsed = parse_reply(message.text)
        if parsed.reserved:
            # Carriers answer STOP/START/HELP on SMS themselves: a second answer from us
            # would be noise (or cost). Elsewhere it is ordinary text for the agent.
            return [] if message.channel == "sms" else None
        directive = parsed.directive
        if directive is not None and directive.scope == "pulse" and parsed.code is None:
            return [self._reply(await apply_pulse(ctx.deps.pulse, directive))]
        alert, explicit = await self._match(message, parsed, ctx)
        if alert is None:
            if parsed.code is not None and (directive is not None or parsed.error):
                return [self._reply(f"There is no alert #{parsed.code}.")]
            return None
        code = alert["code"]
        if parsed.error is not None:
            return [self._reply(parsed.error, code)]
        if directive is None:
            return await self._ask_agent(message, ctx, alert, explicit)
        by = f"owner via {message.channel}"
        if isinstance(directive, ALERT_DIRECTIVES):
            outcome = await self._router.apply(code, directive, by)
            return [self._reply(outcome.text, code)]
        if directive.scope == "cron":
            return [self._reply(await apply_cron(ctx.deps.cron, alert, directive, ctx.now), code)]
        return [self._reply(await apply_pulse(ctx.deps.pulse, directive), code)]

    async def _match(
        self, message: InboundMessage, parsed: ParsedReply, ctx: RunContext
    ) -> tuple[Doc | None, bool]:
        """The alert this reply is about, and whether the owner named it (code, reply-to)."""
        store = self._router.store
        if parsed.code is not None:
            return await store.by_code(parsed.code), True
        if message.reply_to:
            code = await store.code_for_message(message.channel, message.chat_id, message.reply_to)
            if code is not None:
                return await store.by_code(code), True
        if parsed.directive is not None or parsed.error is not None:
            return await store.latest_sent(), False
        since = ctx.now - self._router.policy.context_window
        return await store.latest_sent(since), False

    async def _ask_agent(
        self, message: InboundMessage, ctx: RunContext, alert: Doc, explicit: bool
    ) -> list[Reply]:
        """Free text about an alert: the agent answers, knowing which alert it is."""
        about = dataclasses.replace(ctx, alert=AlertInPlay(public(alert), explicit))
        reply = await self._agent.respond(message.text, about)
        if not reply.text.strip():
            return [Reply("(done; nothing to add)")]
        return [Reply(reply.text)]

    @staticmethod
    def _reply(text: str, code: str | None = None) -> Reply:
        """Confirmations carry the alert code, so a reply to them finds the alert too."""
        return Reply(text, meta={"alert_code": code} if code else {})


async def alert_prompt_section(ctx: RunContext) -> str | None:
    """System-prompt text for a reply about an alert (registered on the agent)."""
    if ctx.alert is None:
        return None
    alert = ctx.alert.alert
    lines = [
        "## The alert this message is about",
        f"#{alert.get('code')} [{alert.get('severity')}] {alert.get('title')}",
    ]
    if alert.get("body"):
        lines.append(str(alert["body"])[:1500])
    raised = alert.get("created_at")
    when = local_time(raised, ctx.now, ctx.deps.settings.tz) if raised else "?"
    lines.append(
        f"Status: {alert.get('status')}; seen {alert.get('count', 1)} time(s); "
        f"raised by {alert.get('source')} at {when}."
    )
    if not ctx.alert.named_by_owner:
        lines.append(
            "The owner did not name the alert: it is the latest one sent to them, so the "
            "message may be about something else."
        )
    lines.append(
        "Answer the owner's message in that light. To change the alert use manage_alerts "
        f"with code {alert.get('code')!r}."
    )
    return "\n".join(lines)
