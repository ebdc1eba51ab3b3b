"""``send_message``: the owner's agent writes to someone on a running channel.

Owner tier only (``writes=True``). It goes through the outbox like every reply, so it
is stored, retried and never sent twice; ``to: "owner"`` reaches the owner's own chat
on that channel, which is how a pulse speaks up without knowing chat ids.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.context import RunContext
from agent.tools.base import Tool, ToolError, ToolResult
from agent.tools.sending import deliver
from channels.registry import ChannelName

E164 = re.compile(r"^\+[1-9]\d{6,14}$")
TEXT_LIMIT = 4_000
SEND_CHANNELS = (ChannelName.TELEGRAM, ChannelName.WHATSAPP, ChannelName.SMS)
"""The channels ``send_message`` writes on (``DESIGN.md``)."""


class SendArgs(BaseModel):
    channel: Literal[ChannelName.TELEGRAM, ChannelName.WHATSAPP, ChannelName.SMS]
    to: str = Field(description="'owner', Telegram chat id or E.164")
    text: str


def _recipient(channel: str, to: str, ctx: RunContext) -> str:
    target = to.strip()
    if target.lower() == "owner":
        address = ctx.deps.reach.address(channel)
        if address is None and channel == ChannelName.TELEGRAM:
            raise ToolError("OWNER_TELEGRAM_IDS is not set, so the owner has no Telegram chat")
        if address is None:
            raise ToolError("OWNER_PHONE is not set, so the owner has no phone number")
        return address
    if channel == ChannelName.TELEGRAM:
        if not re.fullmatch(r"-?\d{1,20}", target):
            raise ToolError(f"'to' must be a numeric Telegram chat id or 'owner', got {to!r}")
        return target
    compact = re.sub(r"[\s\-().]", "", target)
    if not E164.match(compact):
        raise ToolError(f"'to' must be an E.164 number such as +14155550100 or 'owner', got {to!r}")
    return compact


async def _send(args: SendArgs, ctx: RunContext) -> ToolResult:
    text = args.text.strip()
    if not text:
        raise ToolError("text is empty")
    if len(text) > TEXT_LIMIT:
        raise ToolError(f"text is {len(text)} characters; the limit is {TEXT_LIMIT}")
    running, channel = ctx.deps.channels, str(args.channel)  # the plain name, as stored
    if channel not in running:
        live = ", ".join(n for n in SEND_CHANNELS if n in running) or "none"
        raise ToolError(f"channel {channel!r} is not running (running: {live})")
    chat_id = _recipient(channel, args.to, ctx)
    return await deliver(ctx, channel, chat_id, text)


def any_sender_running(ctx: RunContext) -> bool:
    return any(name in ctx.deps.channels for name in SEND_CHANNELS)


SEND_MESSAGE: Tool[Any] = Tool(
    name="send_message",
    description=(
        "Send text on a channel to 'owner' or another recipient. Anyone but the owner and "
        "WhatsApp contacts with can_reply is held until the owner confirms. At most 5 sends "
        "per exchange."
    ),
    args=SendArgs,
    handler=_send,
)
