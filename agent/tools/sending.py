"""What every sending tool goes through: the per-exchange cap, the owner's approval of
new recipients, the shared SMS budget, and the outbox (stored, retried, sent once).

A message to someone who is neither the owner nor a WhatsApp contact with
``can_reply`` is not sent: it is held, and the owner is asked in their main chat to
reply ``send <code>``. Text the model read (a web page, a contact's message, a
database row) can therefore never make it write to a stranger on its own.
"""

from __future__ import annotations

import hashlib
import uuid

from agent.context import RunContext
from agent.owner import owner_address, owner_chat
from agent.tools.base import ToolError, ToolResult
from channels.types import SMS_BUDGET_TAKEN, OutboundMessage
from storage.held_sends import HeldSends
from storage.sms_budget import take_sms
from storage.whatsapp_permissions import WhatsAppPermissions

CONFIRM_WORD = "send"


async def _approved(ctx: RunContext, channel: str, chat_id: str) -> bool:
    if chat_id == owner_address(ctx.deps.settings, channel):
        return True
    if channel == "whatsapp":
        record = await WhatsAppPermissions(ctx.deps.db).get(chat_id)
        return record is not None and record.can_reply
    return False


async def deliver(ctx: RunContext, channel: str, chat_id: str, text: str) -> ToolResult:
    """Send ``text`` to ``chat_id`` on ``channel`` within the limits, or hold it."""
    outbox = ctx.deps.outbox
    if outbox is None:
        raise ToolError("sending is unavailable: the outbox is not running")
    settings = ctx.deps.settings
    limit = settings.max_sends_per_exchange
    if ctx.tally.sends >= limit:
        raise ToolError(
            f"not sent: at most {limit} messages may be sent in one exchange, and {limit} "
            "already were. Tell the owner which messages were not sent."
        )
    if not await _approved(ctx, channel, chat_id):
        return await _hold(ctx, channel, chat_id, text)
    meta: dict[str, object] = {}
    if channel == "sms":
        if not await take_sms(ctx.deps.db, ctx.now, settings.sms_per_hour):
            raise ToolError(
                f"not sent: the hourly SMS budget ({settings.sms_per_hour}) is used up. "
                "Tell the owner, or use another channel."
            )
        meta[SMS_BUDGET_TAKEN] = True
    # Inside a run, or an exchange about one stored message, the same message is sent
    # once even if the run or exchange is replayed.
    scope = ctx.run_id or uuid.uuid4().hex
    digest = hashlib.sha256(f"{channel}|{chat_id}|{text}".encode()).hexdigest()[:16]
    fresh = await outbox.enqueue(
        OutboundMessage(channel, chat_id, text, f"send:{scope}:{digest}", meta=meta)
    )
    if fresh:
        ctx.tally.sends += 1
    return {"queued": True, "channel": channel, "to": chat_id, "duplicate": not fresh}


async def _hold(ctx: RunContext, channel: str, chat_id: str, text: str) -> ToolResult:
    held = await HeldSends(ctx.deps.db).hold(channel, chat_id, text, ctx.now)
    target = owner_chat(ctx.deps.settings, ctx.deps.channels, primary=ctx.deps.primary_channel)
    ask = (
        f"✋ I would like to send a {channel} message to {chat_id}, who is not one of your "
        f"approved contacts:\n“{text}”\nReply '{CONFIRM_WORD} {held.code}' to send it."
    )
    assert ctx.deps.outbox is not None  # checked by deliver
    await ctx.deps.outbox.enqueue(
        OutboundMessage(target.channel, target.chat_id, ask, f"held:{held.code}")
    )
    return {
        "queued": False,
        "needs_owner_confirmation": True,
        "code": held.code,
        "note": f"Not sent yet: {chat_id} is not an approved recipient. The owner was asked "
        f"to reply '{CONFIRM_WORD} {held.code}' to send it; say so in your answer.",
    }
