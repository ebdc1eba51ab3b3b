"""The agent: one exchange = load history, build the prompt, run the loop, store it all.

The user's message is stored before the model is called, so a model failure
never loses it; the user then gets a short apology, never an exception text.

A request is laid out for the providers' prompt caches (``agent.conversation.prompt``):
the system prompt and the tools (sorted by name) stay the same, the history only
grows, and what changes rides in a note after the newest message. The note is sent,
never stored: the stored message is the sender's, as it came. A long chat's older part
is folded into a running summary after replies (``agent.conversation.summary``); it
leads the history, which then holds only the messages after it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from agent.context import RunContext
from agent.conversation.history import fit_history, message_tokens
from agent.conversation.loop import MAX_TURNS, LoopResult, run_loop
from agent.conversation.media_turn import MediaFetch, may_have_media, user_turn
from agent.conversation.prompt import (
    PromptSection,
    build_note,
    build_system_prompt,
    section_texts,
    sorted_tools,
)
from agent.conversation.summary import RunningSummary, Summaries, with_summary
from agent.llm.base import ModelClient, ModelError
from agent.llm.lazy_sdk import warm_model
from agent.llm.types import (
    MessagesAdapter,
    ModelMessage,
    TextPart,
    Usage,
    user_message,
    with_note,
    without_media,
)
from agent.tools.catalog import ToolCatalog
from agent.tools.memory import NOTE_MATCHES, memory_note, note_words
from storage.repos.conversation_record import StoredMessage

log = logging.getLogger(__name__)

APOLOGY = (
    "Sorry, I couldn't reach my language model just now. Your message is saved; "
    "please try again in a minute."
)


def apology(reason: str | None) -> str:
    """What the user is told when an exchange fails: ``reason`` in plain words (never
    an exception's text); without one, that the model could not be reached."""
    if not reason:
        return APOLOGY
    return (
        f"Sorry, I can't answer that right now: {reason}. Your message is saved; "
        "please try again in a minute."
    )


@dataclass
class AgentReply:
    text: str
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[str] = field(default_factory=list)
    failed: bool = False
    failure: str = ""
    """Why it failed, for logs and the inbox row; never shown to the user."""
    exhausted: bool = False
    budget_spent: bool = False
    """The daily token budget stopped it (``text`` says so; ``agent.spend.budget``)."""
    conversation_id: ObjectId | None = None
    duration_ms: float = 0.0
    steps: list[ModelMessage] = field(default_factory=list)
    """The assistant and tool messages of the exchange (a run's record summarises them)."""


def _to_docs(messages: Sequence[ModelMessage], extra: dict[str, Any] | None = None) -> list[Any]:
    docs = []
    for m in messages:
        doc = m.model_dump(mode="json", exclude_none=True)
        doc["tokens"] = message_tokens(m)
        docs.append(doc)
    if extra and docs:
        docs[-1].update(extra)
    return docs


class Agent:
    def __init__(
        self,
        model: ModelClient,
        catalog: ToolCatalog,
        sections: Sequence[PromptSection] = (),
        max_turns: int = MAX_TURNS,
        *,
        media: MediaFetch | None = None,
        summaries: Summaries | None = None,
    ) -> None:
        self.model = model
        self.catalog = catalog
        self.sections = tuple(sections)
        self.max_turns = max_turns
        self.media = media
        """Fetches a message's pending photos and voice notes as its turn is built."""
        self.summaries = summaries
        """Folds a long chat's older messages into its running summary, after replies."""
        self._warming: asyncio.Future[None] | None = None
        """The model's SDK loading: started by ``load_model`` (``watchkeeper run``, once
        it serves) or by the first exchange (``watchkeeper chat``), whichever is first."""

    async def respond(self, text: str, ctx: RunContext, *, isolated: bool = False) -> AgentReply:
        """Answer ``text`` in the conversation named by ``ctx.conversation_key``.

        ``isolated`` runs without earlier history (pulses and cron runs).
        """
        started = time.perf_counter()
        self._loading()  # beside this exchange's reads, if not loaded; the request awaits it
        deps = ctx.deps
        meta = {"channel": ctx.channel, "chat_id": ctx.chat_id}
        if isolated:  # a scheduled run: one at a time, minutes apart; nothing to cache
            conversation = await deps.conversations.open(ctx.conversation_key, meta)
        else:
            conversation = await deps.conversations.active(ctx.conversation_key, **meta)
        conv_id = conversation.id
        inbox_id = ctx.inbox_id
        if inbox_id and ctx.replay:
            earlier = await deps.messages.answer_for(conv_id, str(inbox_id))
            if earlier is not None:  # answered before a crash: same answer, no tokens
                return AgentReply(text=earlier, conversation_id=conv_id)
        docs: list[StoredMessage] = []
        if deps.conversations.take_created(conv_id):  # new: nothing to read
            instruction = await deps.instructions.get()
        else:
            docs, instruction = await asyncio.gather(
                deps.messages.recent(conv_id, limit=1 if isolated else 200),
                deps.instructions.get(),
            )
        next_seq = docs[-1].seq + 1 if docs else 0
        summary = None if isolated else conversation.summary
        history = [] if isolated else self._history(docs, ctx, summary)
        # This exchange's photos and voice notes ride along as parts; history keeps
        # their text fallback (``without_media``), never the bytes.
        # Meanwhile, tools still on their way (MCP servers connecting at start-up).
        if deps.budget.known_spent():  # no call will be made: no media to turn into text
            incoming = user_message(text)
        elif not may_have_media(ctx):  # nothing to fetch: its text, at once
            incoming = user_message(text)
            if waits := self.catalog.waits(ctx):
                await asyncio.gather(*waits)
        else:
            incoming, _ = await asyncio.gather(
                user_turn(text, ctx, self.model, self.media), self.catalog.until_ready(ctx)
            )
        toolset = sorted_tools(self.catalog.for_context(ctx))
        if not instruction.memory_enabled:
            toolset = toolset.only(lambda _: False)
        # The sections' texts: only one that reads the database (the pulse's, past its
        # cache) is waited for; the owner's run gets the facts that bear on their words.
        texts: list[str | None] = []
        notes: list[str | None] = []
        for section in section_texts(ctx, self.sections, changing=False):
            texts.append(await section if inspect.isawaitable(section) else section)
        for section in section_texts(ctx, self.sections, changing=True):
            notes.append(await section if inspect.isawaitable(section) else section)
        memory = None
        if (words := note_words(ctx)) is not None:
            pinned, hits = await deps.recall.for_note(words, NOTE_MATCHES)
            memory = memory_note(ctx, pinned, hits)
        system = build_system_prompt(instruction, ctx, toolset, texts)
        note = build_note(ctx, memory, notes)
        reply = AgentReply(text="", conversation_id=conv_id)
        asked = {"sender": ctx.sender, **({"inbox_id": str(inbox_id)} if inbox_id else {})}
        try:
            turn = with_summary([*history, with_note(incoming, note)], summary)
            result = await run_loop(self.model, system, turn, toolset, ctx, self.max_turns)
        except ModelError as exc:
            # The message is kept (with a marker) so the conversation shows what was lost.
            log.error("model failed for %s: %s", ctx.conversation_key, exc)
            stored = _to_docs([without_media(incoming)], asked)
            stored.append({"role": "assistant", "parts": [], "error": "model_unavailable"})
            reply.text, reply.failed = apology(exc.reason), True
            reply.failure = f"model_unavailable: {exc}"
        else:
            stored = _to_docs([without_media(incoming)], asked) + self._result_docs(result)
            reply.text, reply.usage, reply.tool_calls = result.text, result.usage, result.tool_calls
            reply.exhausted, reply.steps = result.exhausted, result.messages
            reply.budget_spent = result.budget_spent
        # One write per exchange (tokens are counted per model call, by the loop): the
        # inbox holds the message durably until this point, so a crash replays it.
        await deps.messages.append(conv_id, stored, start_seq=next_seq, alone=isolated)
        if self.summaries is not None and not isolated and not reply.failed:
            added = [
                StoredMessage.from_doc({**d, "seq": next_seq + i}) for i, d in enumerate(stored)
            ]
            self.summaries.consider(conversation, [*docs, *added], ctx)  # in the background
        reply.duration_ms = (time.perf_counter() - started) * 1000
        return reply

    async def load_model(self) -> None:
        """Load the model's SDK, unless it is loaded or loading already, and return once
        it is (``watchkeeper run`` then moves its modules out of the collector's sight,
        as start-up's). A failure is only logged: the first request meets it again."""
        await self._loading()

    def _loading(self) -> asyncio.Future[None]:
        if self._warming is None:
            self._warming = asyncio.ensure_future(warm_model(self.model))
        return self._warming

    def _history(
        self, docs: list[StoredMessage], ctx: RunContext, summary: RunningSummary | None
    ) -> list[ModelMessage]:
        """The stored messages after the running summary (all without one), cut to
        ``HISTORY_TOKEN_BUDGET`` (what summaries leave is well within it)."""
        after = summary.through_seq if summary is not None else -1
        docs = [d for d in docs if d.parts and d.seq > after]
        messages = MessagesAdapter.validate_python(
            [{"role": d.role, "parts": d.parts} for d in docs]
        )
        tokens = [d.tokens for d in docs]
        seqs = [d.seq for d in docs]
        return fit_history(messages, tokens, ctx.deps.settings.history_token_budget, seqs)

    @staticmethod
    def _result_docs(result: LoopResult) -> list[dict[str, Any]]:
        meta = {
            "usage": result.usage.model_dump(),
            "model": result.model,
            "turns": result.turns,
            "tool_calls": result.tool_calls,
        }
        messages = list(result.messages)
        if result.exhausted or result.budget_spent:
            # The honest "ran out of steps" (or budget) reply is ours; store it too.
            messages.append(ModelMessage(role="assistant", parts=[TextPart(text=result.text)]))
        return _to_docs(messages, meta)
