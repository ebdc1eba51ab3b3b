"""The owner's "send 4711": releases a message the agent was not allowed to send alone
(see ``agent/tools/sending.py``). Tried before alert directives, owner tier only."""

from __future__ import annotations

import re
import uuid

from agent.context import RunContext
from channels.types import InboundMessage, OutboundMessage, Reply
from storage.held_sends import HeldSends

CONFIRM = re.compile(r"^\W*send\s+#?(\d{4})\W*$", re.IGNORECASE)


async def confirm_held_send(message: InboundMessage, ctx: RunContext) -> list[Reply] | None:
    found = CONFIRM.match(message.text)
    if found is None:
        return None
    code = found.group(1)
    held = await HeldSends(ctx.deps.db).take(code, ctx.now)
    if held is None:
        return [Reply(f"No message is waiting for 'send {code}' (they expire after a day).")]
    outbox = ctx.deps.outbox
    if outbox is None or held.channel not in ctx.deps.channels:
        return [Reply(f"Not sent: {held.channel} is not running, so the message was dropped.")]
    key = f"confirmed:{ctx.run_id or uuid.uuid4().hex}"
    await outbox.enqueue(OutboundMessage(held.channel, held.chat_id, held.text, key))
    return [Reply(f"Sent to {held.chat_id} on {held.channel}.")]
