"""A long chat's older part, folded into a running summary so requests stay small.

Once a chat's messages after its running summary pass ``HISTORY_RECENT_TOKENS``, the
oldest of them (all but about the newest half of that) are folded into the summary by
one model call. Guarantees:

1. Never in the reply's way: the call is made in a task of its own, started after the
   exchange is stored; the answer is returned (and sent) without waiting for it. One
   summary per chat at a time.
2. Incremental: the call reads the summary so far and only the messages after it; the
   summary is stored with the conversation (``conversations.summary``: ``text``,
   ``through_seq``), and only if it still ends where this call began.
3. Within the daily token budget, as any call: reserved before, settled after (counted
   as chat tokens). At 80% of the cap or more, no summary is made: the chat keeps the
   old cut (``HISTORY_TOKEN_BUDGET``) until the budget resets.
4. A failure (model error, budget) loses nothing: requests keep the messages after the
   summary so far, cut at ``HISTORY_TOKEN_BUDGET`` as before; it is logged, and tried
   again after the next exchange at least ``RETRY_AFTER`` later.
5. Outside text is never laundered: every untrusted block (a web page, an MCP result, a
   contact's words) is left out of what the summariser reads, replaced by
   ``LEFT_OUT``, so no outside words come back as Watchkeeper's. Contacts' chats,
   made of outside text, are not summarised (their old messages are only cut).

The summary rides at the start of the history (``with_summary``), so a request's start
stays the same from one summary to the next and the providers' prompt caches match.
Facts belong in memory; the summary keeps the thread: what was agreed, what is open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId

from agent.context import RunContext
from agent.conversation.history import message_tokens, shorten_tool_results
from agent.llm.base import ModelClient, ModelError
from agent.llm.types import (
    MessagesAdapter,
    ModelMessage,
    NotePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    user_message,
)
from agent.llm.untrusted import UNTRUSTED
from agent.spend.budget import WARN_AT, BudgetView, request_bound
from runtime.tasks import stop_task
from storage.repos.conversation_record import Conversation, StoredMessage, Summary

log = logging.getLogger(__name__)

SUMMARY_HEAD = "[Watchkeeper's summary of the earlier conversation, not the sender's words]"
LEFT_OUT = "[outside text left out]"
"""What stands in for an untrusted block in what the summariser reads."""
SUMMARY_SYSTEM = (
    "You keep the running summary of a chat between the owner and Watchkeeper, their "
    "assistant. Rewrite the summary so far with the new messages folded in: what was "
    "agreed or decided (who, what, when), promises and open "
    "questions, and where the talk stands; most important first, short lines. Say who "
    "said or promised what (the owner, Watchkeeper: never I or you) and give dates as "
    "calendar dates (the owner's lines carry their time). Leave out "
    f"small talk and what save_memory saved (memory keeps it). {LEFT_OUT} "
    "marks words you were not shown: never guess them. At most 250 words, plain text, "
    "no preamble."
)
SUMMARY_MAX_CHARS = 3_000
"""The longest summary kept (about 700 tokens); a longer answer is cut at a line."""
LINE_CHARS = 800
"""Of each message's text, what the summariser reads (tool results are shorter)."""
RESULT_CHARS = 300
RETRY_AFTER = timedelta(minutes=5)
HISTORY_READ = 200
"""A chat's newest messages read for a summary, as for a request (``Agent.respond``)."""
_BLOCK = re.compile(
    r"<([a-z_]+)(?:\s+[a-z_]+=\"[^\"]*\")*\s+" + re.escape(UNTRUSTED) + r">.*?(?:</\1>|\Z)",
    re.S,
)


RunningSummary = Summary
"""The conversation's summary of its messages up to ``through_seq``, as stored."""


def with_summary(turn: list[ModelMessage], summary: RunningSummary | None) -> list[ModelMessage]:
    """``turn`` with the summary as a note before the first message's own parts (it is
    always a user message; never stored)."""
    if summary is None or not turn:
        return turn
    first = turn[0]
    note = NotePart(text=f"{SUMMARY_HEAD}\n{summary.text}")
    return [first.model_copy(update={"parts": [note, *first.parts]}), *turn[1:]]


def stretch_to_fold(docs: Sequence[StoredMessage], recent_tokens: int) -> list[StoredMessage]:
    """Of the messages after the summary (``docs``, stored, in order), the oldest to fold
    in: none while they fit ``recent_tokens``; else all but the newest ones within half
    of it, ending before a user message (the kept part starts with one) and always
    keeping the newest exchange."""
    tokens = [_sent_tokens(d) for d in docs]
    if recent_tokens <= 0 or sum(tokens) <= recent_tokens:
        return []
    kept, cut = 0, len(docs)
    for i in range(len(docs) - 1, -1, -1):
        if kept + tokens[i] > recent_tokens // 2:
            break
        kept += tokens[i]
        cut = i
    users = [i for i, d in enumerate(docs) if d.role == "user"]
    if not users:
        return []
    later = [i for i in users if i >= cut]
    cut = min(later[0], users[-1]) if later else users[-1]
    return list(docs[:cut])


def _sent_tokens(doc: StoredMessage) -> int:
    """A stored message's tokens as history sends it (an old tool result shortened)."""
    stored = doc.tokens
    if doc.role != "tool":
        return stored
    [message] = MessagesAdapter.validate_python([{"role": "tool", "parts": doc.parts}])
    return min(stored, message_tokens(shorten_tool_results(message)))


def without_outside(text: str) -> str:
    """``text`` with every untrusted block replaced by ``LEFT_OUT``; all of it when a
    marker is left that is not a whole block (a false alarm leaves out our own words,
    never lets outside ones through)."""
    if UNTRUSTED not in text:
        return text
    kept = _BLOCK.sub(LEFT_OUT, text)
    return LEFT_OUT if UNTRUSTED in kept else kept


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        return without_outside(value)
    if isinstance(value, dict):
        return {without_outside(str(k)): _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v) for v in value]
    return value


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def transcript(messages: Sequence[ModelMessage], times: Sequence[str] = ()) -> str:
    """What the summariser reads of ``messages``: one line a part, outside text left out;
    an owner's words start with their time (``times``, one a message, when given), so
    "tomorrow" can become a date."""
    lines: list[str] = []
    for n, message in enumerate(messages):
        who = {"user": "Owner", "assistant": "Watchkeeper", "tool": "Tool"}[message.role]
        at = times[n] if n < len(times) and message.role == "user" else ""
        stamp = f"[{at}] " if at else ""
        for part in message.parts:
            if isinstance(part, TextPart):
                line = _clip(without_outside(part.text), LINE_CHARS)
                line = stamp + line if line else line
            elif isinstance(part, ToolCallPart):
                args = json.dumps(_scrubbed(part.arguments), default=str, ensure_ascii=False)
                line = "called " + _clip(f"{part.name} {args}", RESULT_CHARS)
            elif isinstance(part, ToolResultPart):
                result = json.dumps(_scrubbed(part.result), default=str, ensure_ascii=False)
                line = f"{part.name} answered " + _clip(result, RESULT_CHARS)
            else:
                continue  # media was stored as its text; notes are never stored
            if line:
                lines.append(f"{who}: {line}")
    return "\n".join(lines)


def summary_request(
    before: RunningSummary | None, stretch: Sequence[ModelMessage], times: Sequence[str] = ()
) -> str:
    so_far = before.text if before is not None else "(none yet)"
    return f"Summary so far:\n{so_far}\n\nNew messages:\n{transcript(stretch, times)}"


def local_times(messages: Sequence[StoredMessage], ctx: RunContext) -> list[str]:
    """Each stored message's time on the owner's clock (day and date: a summary read
    days later must not say "tomorrow")."""
    return [
        f"{m.created_at.astimezone(ctx.tz):%a %d %b %Y %H:%M}" if m.created_at else ""
        for m in messages
    ]


def bounded(text: str, limit: int = SUMMARY_MAX_CHARS) -> str:
    """The summary as kept: at most ``limit`` characters, cut at a line when longer."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    return (head[: head.rfind("\n")] if "\n" in head else head[: limit - 1]) + "…"


@dataclass
class Summaries:
    """Folds chats' older messages into their running summaries, in the background.

    Built once by the composition root, stopped there (``stop``) before the database
    closes; ``consider`` is told of each stored exchange."""

    model: ModelClient
    _tasks: dict[ObjectId, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _retry_at: dict[ObjectId, datetime] = field(default_factory=dict, init=False)
    """Conversations whose last summary failed: not tried again before then."""
    _closed: bool = field(default=False, init=False)

    def consider(
        self,
        conversation: Conversation,
        docs: Sequence[StoredMessage],
        ctx: RunContext,
    ) -> None:
        """After an exchange of ``conversation`` was stored (``docs``: its stored messages
        to the newest, with ``seq`` and ``tokens``): start a summary when the messages
        after the running one outgrew ``HISTORY_RECENT_TOKENS``. Returns at once."""
        conv_id = conversation.id
        recent = ctx.deps.settings.history_recent_tokens
        if self._closed or recent <= 0 or ctx.tier != "owner" or conv_id in self._tasks:
            return
        retry_at = self._retry_at.get(conv_id)
        if retry_at is not None and ctx.now < retry_at:
            return
        before = conversation.summary
        after = before.through_seq if before is not None else -1
        if sum(d.tokens for d in docs if d.seq > after) <= recent:
            return  # stored sizes are never under what history sends: nothing to fold
        task = asyncio.create_task(self._fold(conversation, ctx), name=f"summary {conv_id}")
        self._tasks[conv_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(conv_id, None))

    async def settled(self) -> None:
        """Return once every summary started so far has ended (tests, benchmarks)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def stop(self) -> None:
        """No new summaries; those under way are cancelled (their tokens freed)."""
        self._closed = True
        for task in list(self._tasks.values()):
            await stop_task(task)  # type: ignore[arg-type]

    async def _fold(self, conversation: Conversation, ctx: RunContext) -> None:
        """Fold the stretch due, if any, into the conversation's summary. The messages
        are read again: the exchange may have redacted some (``forget_memory``)."""
        conv_id = conversation.id
        key = conversation.key or ctx.conversation_key
        try:
            # As stored now: another summary may have ended since the exchange began.
            before, sweeps = await ctx.deps.conversations.summary(conv_id)
            after = before.through_seq if before is not None else -1
            docs = await ctx.deps.messages.recent(conv_id, limit=HISTORY_READ)
            unsummarised = [d for d in docs if d.parts and d.seq > after]
            stretch = stretch_to_fold(unsummarised, ctx.deps.settings.history_recent_tokens)
            if not stretch:
                return
            text = await self._summarise(before, stretch, ctx)
        except Exception as exc:  # logged; requests keep the old cut
            self._retry_at[conv_id] = ctx.deps.clock() + RETRY_AFTER
            log.warning("could not summarise %s (tried again later): %s", key, exc)
            return
        if text is None:
            return
        self._retry_at.pop(conv_id, None)
        through = stretch[-1].seq
        held = before.through_seq if before is not None else None
        try:
            saved = await ctx.deps.conversations.save_summary(
                key, conv_id, text, through, held, sweeps
            )
        except Exception:
            log.exception("could not store the summary of %s", key)
            return
        if saved:
            log.info("summarised %s through message %d (%d chars)", key, through, len(text))

    async def _summarise(
        self, before: RunningSummary | None, stretch: list[StoredMessage], ctx: RunContext
    ) -> str | None:
        """The new summary; None when the budget is near its cap (no call made)."""
        budget = ctx.deps.budget
        view = await budget.view(fresh=False)
        if view.capped and view.share >= WARN_AT:
            log.info("no summary of %s: the daily token budget is near its cap", ctx.chat_id)
            return None
        kept = [d for d in stretch if d.parts]
        messages = MessagesAdapter.validate_python(
            [{"role": d.role, "parts": d.parts} for d in kept]
        )
        times = local_times(kept, ctx)
        request = [user_message(summary_request(before, messages, times))]
        hold = await budget.reserve(request_bound(SUMMARY_SYSTEM, request))
        if isinstance(hold, BudgetView):
            log.info("no summary of %s: the daily token budget is spent", ctx.chat_id)
            return None
        try:
            response = await self.model.request(SUMMARY_SYSTEM, request, [])
        except BaseException:
            await budget.release(hold)
            raise
        usage = response.usage
        await budget.settle(
            hold, "chat", response.model or self.model.name, usage.input_tokens,
            usage.output_tokens, first=False, cached_input_tokens=usage.cached_input_tokens,
        )  # fmt: skip
        text = bounded(response.message.text)
        if not text:
            raise ModelError("the summary came back empty", retryable=True)
        return text
