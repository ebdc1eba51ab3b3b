"""The owner's "send 4711" (or "approve 4711") and "cancel 4711": release or drop what
the agent was not allowed to do alone: messages to new recipients
(``agent/tools/sending.py``) and the calls a run held after reading outside text
(``agent/tools/held.py``), every one of the group at once. Tried before alert
directives, owner tier only.

Each released message is queued under a key made of its group's key and the message
itself, so a confirmation replayed after a crash half-way, or sent again, queues what
is missing and sends nothing twice (``storage.repos.held_sends``, guarantees 2 and 3).
Each held call is claimed before it is made, as the run that held it, so it is made
once however often the approval arrives (guarantee 5).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable

from agent.context import RunContext
from agent.tools.base import Toolset, result_json
from agent.tools.catalog import ToolCatalog
from agent.tools.held import approved_context
from channels.delivery.outbox import Outbox
from channels.types import InboundMessage, OutboundMessage, Reply
from storage.repos.held_sends import HeldGroup, HeldSend, HeldSends

log = logging.getLogger(__name__)
CONFIRM = re.compile(r"^\W*(?:send|approve)\s+#?(\d{4})\W*$", re.IGNORECASE)
DECLINE = re.compile(
    r"^\W*(?:cancel|drop|don[’']?t\s+send|do\s+not\s+send)\s+#?(\d{4})\W*$", re.IGNORECASE
)
EXPIRED = "No message is waiting for '{word} {code}' (they expire after a day)."
EXPIRED_ACTIONS = "Nothing is waiting for '{word} {code}' (held actions expire after a day)."
SHOWN_RESULT = 200
"""Characters of a held call's result in the owner's confirmation."""
Confirm = Callable[[InboundMessage, RunContext], Awaitable[list[Reply] | None]]


def confirming(catalog: ToolCatalog) -> Confirm:
    """The interceptor for "send CODE" / "approve CODE" / "cancel CODE", making held
    calls with the tools of ``catalog``."""

    async def confirm(message: InboundMessage, ctx: RunContext) -> list[Reply] | None:
        return await confirm_held_send(message, ctx, catalog)

    return confirm


async def confirm_held_send(
    message: InboundMessage, ctx: RunContext, catalog: ToolCatalog | None = None
) -> list[Reply] | None:
    """Release or drop the group a confirmation names; None when ``message`` is not one.
    Without ``catalog`` held calls cannot be made, and are reported so."""
    if (found := CONFIRM.match(message.text)) is not None:
        word = "approve" if "approve" in found.group(0).lower() else "send"
        return [Reply(await _release(found.group(1), ctx, catalog, word))]
    if (found := DECLINE.match(message.text)) is not None:
        return [Reply(await _decline(found.group(1), ctx))]
    return None


async def _release(code: str, ctx: RunContext, catalog: ToolCatalog | None, word: str) -> str:
    held = HeldSends(ctx.deps.db)
    group = await held.approve(code, ctx.now)  # recorded before anything is made
    if group is None:
        return (EXPIRED if word == "send" else EXPIRED_ACTIONS).format(word=word, code=code)
    outbox = ctx.deps.outbox
    running = [s for s in group.sends if s.channel in ctx.deps.channels]
    dropped = [s for s in group.sends if s not in running]
    # One recipient's messages in order; recipients side by side.
    chats = _by_chat(running)
    await asyncio.gather(*(_queue(outbox, group, sends) for sends in chats.values()))
    done: list[str] = []
    if group.actions:
        # One run for the group's calls, as the run that held them (the send cap counts
        # across them); its tools once they can be known (MCP servers still starting).
        run = approved_context(ctx.deps, group, ctx)
        if catalog is not None:
            await catalog.until_ready(run)
        tools = catalog.for_context(run) if catalog is not None else Toolset()
        done = [await _make(held, group, i, run, tools) for i in range(len(group.actions))]
    await held.release(group)
    lines = [_released_text(running, dropped)] if group.sends else []
    return "\n".join([*lines, *done])


async def _make(
    held: HeldSends, group: HeldGroup, index: int, run: RunContext, tools: Toolset
) -> str:
    """Make the held call ``index`` once, in ``run`` with ``tools``; one line saying how
    it went. Claimed only once it can be made: a tool missing now is not used up."""
    action = group.actions[index]
    if index in group.claimed:
        return f"• {action.tool}: already done before (not done again)."
    if action.tool not in tools:
        return f"• {action.tool}: not done: that tool is not available now."
    if not await held.claim(group, index, run.now):
        return f"• {action.tool}: already done before (not done again)."
    try:
        result = await tools.call(action.tool, action.args, run)
    except Exception:  # a tool turns its failures into errors; this is a last guard
        log.exception("held call %s of %s failed", action.tool, group.code)
        result = {"error": "it failed unexpectedly"}
    if "error" in result:
        return f"• {action.tool}: not done: {_cut(str(result['error']))}"
    return f"• {action.tool}: done {_cut(result_json(result, run.tz))}"


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_RESULT else text[: SHOWN_RESULT - 1] + "…"


async def _queue(outbox: Outbox, group: HeldGroup, sends: list[HeldSend]) -> None:
    for send in sends:
        key = f"confirmed:{group.key}:{_digest(send)}"
        await outbox.enqueue(OutboundMessage(send.channel, send.chat_id, send.text, key))


async def _decline(code: str, ctx: RunContext) -> str:
    group = await HeldSends(ctx.deps.db).decline(code, ctx.now)
    if group is None:
        return EXPIRED.format(word="cancel", code=code)
    if group.actions:
        count = len(group.actions) + len(group.sends)
        return f"Dropped: none of the {count} held action(s) was done."
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
