"""The owner's "send 4711" (or "approve 4711") and "cancel 4711": release or drop what
the agent was not allowed to do alone: messages to new recipients
(``agent/tools/sending.py``) and the calls a run held after reading outside text
(``agent/tools/held.py``), every one of the group at once. Tried before alert
directives, owner tier only.

Each released message is queued under a key made of its group's key and the message
itself, so a confirmation replayed after a crash half-way, or sent again, queues what
is missing and sends nothing twice (``storage.repos.held_sends``, guarantees 2 and 3).

Each held call is made in order, as the run that held it, once or said not to have
finished (guarantee 5): marked started by this approval (the stored message it
answers) before it is made, its outcome recorded after. A call with a recorded outcome
is reported as it went, never made again. A call started and never finished (the
process was killed during it: the approval is handled again on restart, or its lease
lapsed) is reported as interrupted, with what it may have done, and the group goes
back to the owner: nothing after it is made, and "approve CODE" again makes it (and
the rest) anew. A call another approval is making right now is left to that one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from agent.context import RunContext
from agent.tools.base import Toolset, result_json
from agent.tools.catalog import ToolCatalog
from agent.tools.held import APPROVE_WORD, approved_context
from agent.tools.sending import DECLINE_WORD
from channels.delivery.outbox import Outbox
from channels.types import InboundMessage, OutboundMessage, Reply
from storage.repos.held_sends import LEASE, HeldGroup, HeldSend, HeldSends

log = logging.getLogger(__name__)
CONFIRM = re.compile(r"^\W*(?:send|approve)\s+#?(\d{4})\W*$", re.IGNORECASE)
DECLINE = re.compile(
    r"^\W*(?:cancel|drop|don[’']?t\s+send|do\s+not\s+send)\s+#?(\d{4})\W*$", re.IGNORECASE
)
EXPIRED = "No message is waiting for '{word} {code}' (they expire after a day)."
EXPIRED_ACTIONS = "Nothing is waiting for '{word} {code}' (held actions expire after a day)."
SHOWN_RESULT = 200
"""Characters of a held call's result in the owner's confirmation."""
Confirm = Callable[[InboundMessage, RunContext], Awaitable[list[Reply] | None] | None]


def confirming(catalog: ToolCatalog) -> Confirm:
    """The interceptor for "send CODE" / "approve CODE" / "cancel CODE", making held
    calls with the tools of ``catalog``. Any other message is declined at once (None,
    no coroutine): the words are checked before anything waits."""

    def confirm(
        message: InboundMessage, ctx: RunContext
    ) -> Coroutine[Any, Any, list[Reply] | None] | None:
        if CONFIRM.match(message.text) is None and DECLINE.match(message.text) is None:
            return None
        return confirm_held_send(message, ctx, catalog)

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
    by = ctx.inbox_id or uuid.uuid4().hex  # this approval, the same when handled again
    group = await held.approve(code, ctx.now, by)  # recorded before anything is made
    if group is None:
        if (seen := await held.spent_by(code, by, ctx.now)) is not None:
            return "\n".join(_said_before(seen))
        return (EXPIRED if word == "send" else EXPIRED_ACTIONS).format(word=word, code=code)
    outbox = ctx.deps.outbox
    running = [s for s in group.sends if s.channel in ctx.deps.channels]
    dropped = [s for s in group.sends if s not in running]
    # One recipient's messages in order; recipients side by side.
    chats = _by_chat(running)
    await asyncio.gather(*(_queue(outbox, group, sends) for sends in chats.values()))
    made = Made()
    if group.actions:
        # One run for the group's calls, as the run that held them (the send cap counts
        # across them); its tools once they can be known (MCP servers still starting).
        run = approved_context(ctx.deps, group, ctx)
        if catalog is not None:
            await catalog.until_ready(run)
        tools = catalog.for_context(run) if catalog is not None else Toolset()
        made = await _make_all(held, group, run, tools, by)
    if made.interrupted:
        await held.reopen(group, made.interrupted, by, ctx.now)
    elif made.complete:
        await held.release(group)
    lines = [_released_text(running, dropped)] if group.sends else []
    return "\n".join([*lines, *made.lines, *_interrupted_text(group, made)])


@dataclass
class Made:
    """How an approval's held calls went: a line each, in order, and where it stopped."""

    lines: list[str] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)
    """Calls cut off while made (by a crash): they go back to the owner."""
    unstarted: list[int] = field(default_factory=list)
    """Calls after an interrupted one or one still being made: not made now."""
    complete: bool = True
    """Every call has a recorded outcome: the group can be forgotten."""


async def _make_all(
    held: HeldSends, group: HeldGroup, run: RunContext, tools: Toolset, by: str
) -> Made:
    """Make the group's held calls in order, as the approval ``by``; stop at one that
    was interrupted or is being made by another approval (what follows may need it)."""
    made = Made()
    for index, action in enumerate(group.actions):
        if made.interrupted or not made.complete:
            made.unstarted.append(index)
            continue
        if index in group.finished:
            made.lines.append(group.finished[index])  # as it went, when it was made
            continue
        started = group.started.get(index)
        if started is not None:
            if started.by == by or started.until <= run.now:
                made.interrupted.append(index)  # its maker died with it
            else:
                made.lines.append(f"• {action.tool}: still being done by an earlier approval.")
                made.complete = False
            continue
        if action.tool not in tools:
            line = f"• {action.tool}: not done: that tool is not available now."
            await held.finish(group, index, line, run.now)
            made.lines.append(line)
            continue
        if not await held.start(group, index, by, run.now):
            made.lines.append(f"• {action.tool}: still being done by an earlier approval.")
            made.complete = False
            continue
        line = await _make(held, group, index, run, tools, by)
        await held.finish(group, index, line, run.now)
        made.lines.append(line)
    return made


async def _make(
    held: HeldSends, group: HeldGroup, index: int, run: RunContext, tools: Toolset, by: str
) -> str:
    """Make the held call ``index`` in ``run`` with ``tools``, its lease kept alive;
    one line saying how it went."""
    action = group.actions[index]
    async with _leased(held, group, index, run, by):
        try:
            result = await tools.call(action.tool, action.args, run)
        except Exception:  # a tool turns its failures into errors; this is a last guard
            log.exception("held call %s of %s failed", action.tool, group.code)
            result = {"error": "it failed unexpectedly, and may have done part of its work"}
    if "error" in result:
        return f"• {action.tool}: not done: {_cut(str(result['error']))}"
    return f"• {action.tool}: done {_cut(result_json(result, run.tz))}"


@contextlib.asynccontextmanager
async def _leased(
    held: HeldSends, group: HeldGroup, index: int, run: RunContext, by: str
) -> AsyncIterator[None]:
    """Renew the lease on call ``index`` while the block runs (a long MCP call): another
    approval meanwhile sees it alive, not interrupted."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(LEASE.total_seconds() / 3)
            try:
                await held.renew(group, index, by, run.now)
            except Exception:  # the lease may lapse: then it is called interrupted
                log.warning("could not renew the lease of held call %s", group.code)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _said_before(group: HeldGroup) -> list[str]:
    """The answer an approval gave when it found calls interrupted, for that approval
    handled again (after a crash before its answer was recorded): nothing is made."""
    made = Made()
    for index in range(len(group.actions)):
        if index in group.finished:
            made.lines.append(group.finished[index])
        elif not made.interrupted:  # the first call without an outcome was cut off
            made.interrupted.append(index)
        else:
            made.unstarted.append(index)
    return [*made.lines, *_interrupted_text(group, made)]


def _interrupted_text(group: HeldGroup, made: Made) -> list[str]:
    """What the owner is told of calls cut off while made, and how to go on."""
    if not made.interrupted:
        return []
    lines = [
        f"• {group.actions[i].tool}: interrupted: Watchkeeper stopped while doing it, so it "
        "may or may not have taken effect. Check before you approve it again."
        for i in made.interrupted
    ]
    if made.unstarted:
        rest = ", ".join(group.actions[i].tool for i in made.unstarted)
        lines.append(f"Not started yet: {rest}.")
    lines.append(
        f"Reply '{APPROVE_WORD} {group.code}' to do what was not done, or "
        f"'{DECLINE_WORD} {group.code}' to drop it."
    )
    return lines


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
        made = len(group.finished)
        count = len(group.actions) - made + len(group.sends)
        if made:
            return f"Dropped the {count} held action(s) not done yet ({made} done before)."
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
