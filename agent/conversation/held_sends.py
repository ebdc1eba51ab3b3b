"""The owner's "send 4711" and "cancel 4711": release or drop what the agent was not
allowed to send alone (see ``agent/tools/sending.py``): every message of the group at
once. Tried before alert directives, owner tier only.

Each released message is queued under a key made of its group's key and the message
itself, so a confirmation replayed after a crash half-way, or sent again, queues what
is missing and sends nothing twice (``storage.repos.held_sends``, guarantees 2 and 3).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import defaultdict

from agent.context import RunContext
from channels.delivery.outbox import Outbox
from channels.types import InboundMessage, OutboundMessage, Reply
from storage.repos.held_sends import HeldGroup, HeldSend, HeldSends

CONFIRM = re.compile(r"^\W*send\s+#?(\d{4})\W*$", re.IGNORECASE)
DECLINE = re.compile(
    r"^\W*(?:cancel|drop|don[’']?t\s+send|do\s+not\s+send)\s+#?(\d{4})\W*$", re.IGNORECASE
)
EXPIRED = "No message is waiting for '{word} {code}' (they expire after a day)."


async def confirm_held_send(message: InboundMessage, ctx: RunContext) -> list[Reply] | None:
    if (found := CONFIRM.match(message.text)) is not None:
        return [Reply(await _release(found.group(1), ctx))]
    if (found := DECLINE.match(message.text)) is not None:
        return [Reply(await _decline(found.group(1), ctx))]
    return None


async def _release(code: str, ctx: RunContext) -> str:
    held = HeldSends(ctx.deps.db)
    group = await held.approve(code, ctx.now)
    if group is None:
        return EXPIRED.format(word="send", code=code)
    outbox = ctx.deps.outbox
    running = [s for s in group.sends if s.channel in ctx.deps.channels]
    dropped = [s for s in group.sends if s not in running]
    # One recipient's messages in order; recipients side by side.
    chats = _by_chat(running)
    await asyncio.gather(*(_queue(outbox, group, sends) for sends in chats.values()))
    await held.release(group)
    return _released_text(running, dropped)


async def _queue(outbox: Outbox, group: HeldGroup, sends: list[HeldSend]) -> None:
    for send in sends:
        key = f"confirmed:{group.key}:{_digest(send)}"
        await outbox.enqueue(OutboundMessage(send.channel, send.chat_id, send.text, key))


async def _decline(code: str, ctx: RunContext) -> str:
    group = await HeldSends(ctx.deps.db).decline(code, ctx.now)
    if group is None:
        return EXPIRED.format(word="cancel", code=code)
    if len(group.sends) == 1:
        return f"Dropped: the message to {group.sends[0].chat_id} was not sent."
    return f"Dropped: none of the {len(group.sends)} messages was sent."


def _digest(send: HeldSend) -> str:
    raw = f"{send.channel}|{send.chat_id}|{send.text}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:16]


def _released_text(sent: list[HeldSend], dropped: list[HeldSend]) -> str:
    lines: list[str] = []
    if sent:
        lines.append(f"Sent to {_recipients(sent)}.")
    for channel, sends in _by_channel(dropped).items():
        count = "the message was" if len(sends) == 1 else f"{len(sends)} messages were"
        lines.append(f"Not sent: {channel} is not running, so {count} dropped.")
    return "\n".join(lines)


def _recipients(sends: list[HeldSend]) -> str:
    """``+1 and +2 on sms; 42 on telegram``: each recipient once, by channel."""
    parts = []
    for channel, of_channel in _by_channel(sends).items():
        names = list(dict.fromkeys(send.chat_id for send in of_channel))
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        parts.append(f"{listed} on {channel}")
    return "; ".join(parts)


def _by_channel(sends: list[HeldSend]) -> dict[str, list[HeldSend]]:
    grouped: dict[str, list[HeldSend]] = defaultdict(list)
    for send in sends:
        grouped[send.channel].append(send)
    return dict(grouped)


def _by_chat(sends: list[HeldSend]) -> dict[tuple[str, str], list[HeldSend]]:
    grouped: dict[tuple[str, str], list[HeldSend]] = defaultdict(list)
    for send in sends:
        grouped[(send.channel, send.chat_id)].append(send)
    return dict(grouped)
