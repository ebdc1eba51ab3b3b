"""What every sending tool goes through: the per-exchange cap, the owner's approval of
new recipients, the shared SMS budget, and the outbox (stored, retried, sent once).

A message to someone who is neither the owner nor a WhatsApp contact with
``can_reply`` is not sent: it is held (``storage.repos.held_sends``), and when the exchange
ends the owner is asked in their main chat, in one message for all the exchange held,
to reply ``send <code>``. Text the model read (a web page, a contact's message, a
database row) can therefore never make it write to a stranger on its own. The same
question lists the calls a run held after reading outside text (``agent.tools.held``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.context import RunContext
from agent.tools.base import ToolError, ToolResult
from agent.tools.held import APPROVE_WORD, describe
from channels.registry import ChannelName
from channels.types import SMS_BUDGET_TAKEN, VERBATIM, Button, OutboundMessage, Press
from storage.repos.held_sends import HeldGroup, HeldSend, HeldSends
from storage.repos.sms_budget import take_sms
from storage.repos.whatsapp_permissions import WhatsAppPermissions

CONFIRM_WORD = "send"
DECLINE_WORD = "cancel"


async def _approved(ctx: RunContext, channel: str, chat_id: str) -> bool:
    if chat_id == ctx.deps.reach.address(channel):
        return True
    if channel == ChannelName.WHATSAPP:
        record = await WhatsAppPermissions(ctx.deps.db).get(chat_id)
        return record is not None and record.can_reply
    return False


async def deliver(ctx: RunContext, channel: str, chat_id: str, text: str) -> ToolResult:
    """Send ``text`` to ``chat_id`` on ``channel`` within the limits, or hold it."""
    outbox = ctx.deps.outbox
    settings = ctx.deps.settings
    limit = settings.max_sends_per_exchange
    if ctx.tally.sends >= limit:
        raise ToolError(
            f"not sent: at most {limit} messages may be sent in one exchange, and {limit} "
            "already were. Tell the owner which messages were not sent."
        )
    # A send the owner approved by code (``agent.tools.held``) goes to whom it names.
    if ctx.tally.approved is None and not await _approved(ctx, channel, chat_id):
        return await _hold(ctx, channel, chat_id, text)
    meta: dict[str, object] = {}
    if channel == ChannelName.SMS:
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
    group = await HeldSends(ctx.deps.db).hold(
        HeldSend(channel, chat_id, text), ctx.now, exchange=ctx.run_id
    )
    return {
        "queued": False,
        "needs_owner_confirmation": True,
        "code": group.code,
        "note": f"Not sent yet: {chat_id} is not an approved recipient. Once you finish, the "
        f"owner is asked in one message about every message held now, and replies "
        f"'{CONFIRM_WORD} {group.code}' to send them; say so in your answer.",
    }


def held_codes(results: Iterable[Mapping[str, Any]]) -> list[str]:
    """The approval codes that tool ``results`` name (sends held in one exchange)."""
    codes = (r.get("code") for r in results if r.get("needs_owner_confirmation") is True)
    return list(dict.fromkeys(c for c in codes if isinstance(c, str)))


async def ask_owner(ctx: RunContext, codes: Sequence[str]) -> None:
    """Ask the owner, in their main chat, about each group of held sends: one message
    per group, listing every send in it. Keyed by group and size: a replayed exchange
    asks again only if its group grew."""
    outbox = ctx.deps.outbox
    held = HeldSends(ctx.deps.db)
    target = ctx.deps.reach.chat(primary=ctx.deps.primary_channel)
    for code in codes:
        group = await held.waiting(code, ctx.now)
        if group is None:
            continue  # answered or expired meanwhile
        key = f"held:{group.key}:{len(group.sends)}:{len(group.actions)}"
        delivery = ctx.deps.reach.delivery(target.channel)
        parts = split_whole(ask_text(group), delivery.whole_text)
        for n, part in enumerate(parts):
            # As written: no Markdown may hide a link's address or eat a character.
            index_key = f"{key}:{n}" if n else key
            meta: dict[str, object] = {VERBATIM: True}
            last = n == len(parts) - 1
            buttons = held_buttons(code) if last and delivery.buttons else ()
            message = OutboundMessage(
                target.channel, target.chat_id, part, index_key, buttons=buttons, meta=meta
            )
            await outbox.enqueue(message)


HELD_PRESS = "h"
"""``Press.kind`` of a held-call question's buttons (``agent.conversation.buttons``)."""
HELD_BUTTONS: tuple[tuple[str, str], ...] = (("ok", "Approve"), ("no", "Cancel"))
"""The question's buttons: the press's action and the label; the same as replying
``approve CODE`` / ``cancel CODE``."""


def held_buttons(code: str) -> tuple[Button, ...]:
    """Approve and Cancel for the held group ``code``, where the channel shows buttons."""
    return tuple(
        Button(label, Press(HELD_PRESS, action, code).data) for action, label in HELD_BUTTONS
    )


def split_whole(text: str, limit: int | None) -> list[str]:
    """``text`` in messages of at most ``limit`` characters, so that a channel that cuts
    longer ones (``Delivery.whole_text``) delivers all of it: cut between lines where it can,
    numbered "(1/3)" so the parts read in order whatever order they arrive in."""
    if limit is None or len(text) <= limit:
        return [text]
    room = limit - len("(99/99) ")
    pieces: list[str] = []
    for line in text.split("\n"):
        while len(line) > room:  # a long argument: cut mid-line, nothing dropped
            pieces.append(line[:room])
            line = line[room:]
        pieces.append(line)
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + 1 + len(piece) <= room:
            parts[-1] += "\n" + piece
        else:
            parts.append(piece)
    return [f"({n}/{len(parts)}) {part}" for n, part in enumerate(parts, 1)]


def ask_text(group: HeldGroup) -> str:
    """The owner's question: each recipient, the text once when all share it; each
    held call, and the outside text it followed."""
    if group.actions:
        return _ask_actions(group)
    code, sends = group.code, group.sends
    if len(sends) == 1:
        [send] = sends
        return (
            f"✋ I would like to send a {send.channel} message to {send.chat_id}, who is not "
            f"one of your approved contacts:\n“{send.text}”\nReply '{CONFIRM_WORD} {code}' "
            f"to send it, or '{DECLINE_WORD} {code}' to drop it."
        )
    lines = [
        f"✋ I would like to send {len(sends)} messages to recipients who are not among your "
        "approved contacts:"
    ]
    texts = {send.text for send in sends}
    if len(texts) == 1:
        lines += [f"• {send.chat_id} ({send.channel})" for send in sends]
        lines.append(f"The same text to each:\n“{sends[0].text}”")
    else:
        lines += [f"• {send.chat_id} ({send.channel}): “{send.text}”" for send in sends]
    every = "both" if len(sends) == 2 else f"all {len(sends)}"
    lines.append(
        f"Reply '{CONFIRM_WORD} {code}' to send {every}, or '{DECLINE_WORD} {code}' to drop "
        "them all."
    )
    return "\n".join(lines)


def _ask_actions(group: HeldGroup) -> str:
    """The question about the calls a run held after reading outside text (and any
    sends to new recipients it held beside them)."""
    code = group.code
    read = ", ".join(dict.fromkeys(group.untrusted)) or "outside text"
    what = "a scheduled run" if group.run.scheduled else "our chat"
    name = group.run.job_name
    if name:
        what = f"the job “{name}”"
    lines = [
        f"✋ In {what} I read {read}, which may not speak for you, so I did not do these "
        "without you:"
    ]
    lines += [f"• {describe(action)}" for action in group.actions]
    lines += [f"• send to {s.chat_id} ({s.channel}): “{s.text}”" for s in group.sends]
    lines.append(
        f"Reply '{APPROVE_WORD} {code}' to do them all once, or '{DECLINE_WORD} {code}' "
        "to drop them."
    )
    return "\n".join(lines)
