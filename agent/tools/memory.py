"""The memory tools: ``save_memory``, ``search_memory``, ``forget_memory`` (one fact
per record, ``storage.recall``), and ``update_db_schema``.

A fact saved by a run that had read outside text keeps where it came from
(``agent.tools.held.provenance``) and reaches the model only inside an untrusted block
naming that text, wherever it shows (the note, a search). Facts ride in the note after
the newest message (``memory_note``), never in the system prompt: saving one does not
change the start of the next request, which the providers cache.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, Field, field_validator

from agent.context import RunContext
from agent.llm.untrusted import for_model
from agent.tools.base import Tool, ToolError, ToolResult
from agent.tools.held import provenance
from storage.collections import PROTECTED
from storage.recall import FactHit
from storage.redact import Carrier, Swept, sweep
from storage.repos.memories import Fact, FactSource, FactTooLong, check_text
from storage.text_search import terms


class SaveMemoryArgs(BaseModel):
    memory: str
    replaces: str | None = None


class SearchMemoryArgs(BaseModel):
    query: str
    limit: int | None = None
    """5 when not given (left out of the schema: every request carries it)."""


class ForgetMemoryArgs(BaseModel):
    query: str | None = None
    ids: str | None = None
    """Fact ids, comma-separated (a list is taken too; a string keeps the schema short)."""
    history: bool | None = None

    @field_validator("ids", mode="before")
    @classmethod
    def _joined(cls, value: object) -> object:
        return ",".join(str(v) for v in value) if isinstance(value, list) else value


class UpdateDbSchemaArgs(BaseModel):
    schema_: str = Field(alias="schema", description="Markdown")


SCHEMA_LIMIT = 8_000
BUILT_IN = ("master", "contacts", "schedule", *sorted(PROTECTED))
_REDEFINES = re.compile(
    rf"^[ \t]*(?:[-*#]+[ \t]*)?`?({'|'.join(BUILT_IN)})`?[ \t]*(?::|\(|—|-[ \t]|$)",
    re.IGNORECASE | re.MULTILINE,
)
_ID = re.compile(r"^\s*\[?m?(\d+)\]?\s*$", re.IGNORECASE)
_LINK = re.compile(r"\s(?:is|are|was|were|=|:)\s|:\s", re.IGNORECASE)
NEAR = 0.75
"""Share of terms two facts have in common to be near duplicates."""
SIMILAR = 0.3
"""Share of terms above which a saved fact is reported as maybe about the same thing."""
SEARCH_LIMIT = 20
NOTE_FLOOR = 0.35
"""A fact rides in the note when it scores at least this share of the best one."""


def fact_id(raw: str) -> str:
    """``m12`` from ``m12``, ``12`` or ``[m12]``; ToolError for anything else."""
    match = _ID.match(raw)
    if match is None:
        raise ToolError(f"{raw!r} is not a fact id; ids look like m12 (search_memory shows them)")
    return f"m{match.group(1)}"


def day(at: datetime, ctx: RunContext) -> str:
    return at.astimezone(ctx.tz).strftime("%Y-%m-%d")


def fact_view(fact: Fact, ctx: RunContext) -> ToolResult:
    """A fact as a tool result shows it: outside words inside their untrusted block."""
    view: ToolResult = {
        "id": fact.id,
        "text": for_model(fact.shown()),
        "source": fact.source.words(),
        "date": day(fact.created_at, ctx),
    }
    if fact.status == "stale":
        view["stale"] = fact.note or "marked stale"
    return view


def _same(a: str, b: str) -> bool:
    return " ".join(re.findall(r"\w+", a.casefold())) == " ".join(re.findall(r"\w+", b.casefold()))


def _subject(text: str) -> frozenset[str]:
    """The terms before the first "is", "are", ":"... ("My landlord is X": landlord)."""
    match = _LINK.search(text)
    return frozenset(terms(text[: match.start()])) if match else frozenset()


def _relation(new: str, old: Fact) -> str | None:
    """How saved fact ``old`` stands to the new text, or None when it is unrelated."""
    if _same(new, old.text):
        return "duplicate"
    mine, theirs = set(terms(new)), set(terms(old.text))
    overlap = len(mine & theirs) / max(len(mine | theirs), 1)
    if overlap >= NEAR:
        return "near duplicate"
    subject = _subject(new)
    if subject and subject == _subject(old.text):
        return "same subject, says something else: may contradict"
    if overlap >= SIMILAR:
        return "similar"
    return None


async def _save_memory(args: SaveMemoryArgs, ctx: RunContext) -> ToolResult:
    recall = ctx.deps.recall
    try:
        text = check_text(args.memory)
    except FactTooLong as exc:
        raise ToolError(str(exc)) from None
    source = FactSource.of(provenance(ctx))
    replaces: Fact | None = None
    if args.replaces:
        replaces = await recall.fact(fact_id(args.replaces))
        if replaces is None:
            raise ToolError(
                f"no saved fact {fact_id(args.replaces)}; nothing was saved. search_memory "
                "shows the ids of saved facts"
            )
    related: list[tuple[Fact, str]] = []
    for hit in await recall.facts(text, limit=5):
        if replaces is not None and hit.fact.id == replaces.id:
            continue
        relation = _relation(text, hit.fact)
        if relation is not None:
            related.append((hit.fact, relation))
    duplicate = next((f for f, r in related if r == "duplicate"), None)
    if duplicate is not None and replaces is None:
        if duplicate.source.is_outside and not source.is_outside:  # now the owner's words
            await recall.update(duplicate.id, {"source": source.doc()}, ctx.now)
        return {
            "id": duplicate.id,
            "text": duplicate.text,
            "already_saved": True,
            "note": "this fact was saved before; nothing new was stored",
        }
    fact = await recall.save(text, source, ctx.now, replaces)
    result: ToolResult = {"saved": True, "id": fact.id, "text": fact.text}
    if source.is_outside:
        result["source"] = source.words()
    if replaces is not None:
        result["replaced"] = replaces.id
        carrier = Carrier.correcting(replaces.text, fact.text, f"[corrected: see {fact.id}]")
        if not carrier.empty:  # the old value, out of history too
            await _sweep(ctx, carrier)
    if related:
        result["related"] = [
            {**fact_view(f, ctx), "relation": r} for f, r in related[:3] if r != "duplicate"
        ]
        result["note"] = (
            "Saved; related facts above. If the new fact corrects one, call forget_memory "
            "with its id (next time pass replaces) so only the right one stays."
        )
    return result


async def _search_memory(args: SearchMemoryArgs, ctx: RunContext) -> ToolResult:
    recall = ctx.deps.recall
    limit = 5 if args.limit is None else args.limit
    if not 1 <= limit <= SEARCH_LIMIT:
        raise ToolError(f"limit is 1 to {SEARCH_LIMIT}")
    facts = await recall.facts(args.query, limit)
    messages = await recall.messages(args.query, limit)
    result: ToolResult = {
        "facts": [fact_view(h.fact, ctx) for h in facts],
        "messages": [
            {
                "date": day(m.at, ctx) if m.at is not None else "",
                "channel": m.channel,
                "who": m.who,
                "snippet": m.snippet,
            }
            for m in messages
        ],
    }
    if not facts and not messages:
        result["note"] = "nothing saved or said matches; do not guess, ask the owner"
    return result


def _matches(query_terms: set[str], fact: Fact) -> bool:
    """Whether ``fact`` is about the query: it holds every one of its terms (a
    half-match forgets nothing)."""
    return query_terms <= set(terms(fact.text))


async def _sweep(ctx: RunContext, carrier: Carrier) -> Swept:
    """Take what ``carrier`` carries out of history (chats' summaries too: the next
    exchange reads them afresh) and out of the search index."""
    swept = await sweep(ctx.deps.db, carrier)
    ctx.deps.conversations.refresh()
    await ctx.deps.recall.reindex_messages(swept.messages)
    return swept


async def _forget_memory(args: ForgetMemoryArgs, ctx: RunContext) -> ToolResult:
    recall = ctx.deps.recall
    query = (args.query or "").strip()
    if not query and not args.ids:
        raise ToolError("say what to forget: a query (e.g. 'landlord') or ids (e.g. ['m12'])")
    chosen: dict[str, Fact] = {}
    if args.ids:
        wanted = [fact_id(i) for i in re.split(r"[,\s]+", args.ids) if i]
        for fact in await recall.store.get(wanted):
            chosen[fact.id] = fact
        unknown = [i for i in wanted if i not in chosen]
    else:
        unknown = []
    if query:
        query_terms = set(terms(query))
        if not query_terms:
            raise ToolError(f"{query!r} has no words to search by; name what to forget")
        for fact in await recall.store.all():
            if _matches(query_terms, fact):
                chosen[fact.id] = fact
    gone = await recall.delete(chosen.values())
    carrier = Carrier.of(query, (f.text for f in gone))
    result: ToolResult = {
        "removed": [
            # What each was about, without the details that identify it.
            {"id": f.id, "about": ", ".join(sorted(set(terms(f.text)) - carrier.strong)[:6])}
            for f in gone
        ],
    }
    if unknown:
        result["not_found"] = unknown
    if args.history and not carrier.empty:
        swept = await _sweep(ctx, carrier)
        result["history_redacted"] = {k: v for k, v in swept.counts.items() if v}
    if not gone:
        result["note"] = "no saved fact matched" + (
            "; past messages were still searched" if args.history else ""
        )
    else:
        result["note"] = "forgotten; do not repeat the forgotten details in your answer"
    return result


NOTE_MATCHES = 12
"""Best matches the note considers (each at least ``NOTE_FLOOR`` of the best)."""


def note_words(ctx: RunContext) -> str | None:
    """The words the memory note matches facts against ("": pinned facts only); None
    when the run gets no note (a budget of 0, or not the owner's run)."""
    if ctx.deps.settings.memory_prompt_chars <= 0 or ctx.tier != "owner":
        return None
    return (ctx.owner_words or "").strip()


def memory_note(ctx: RunContext, pinned: list[Fact], hits: list[FactHit]) -> str | None:
    """The saved facts that bear on the words that started the run (``note_words``;
    ``Recall.for_note`` finds them), within ``MEMORY_PROMPT_CHARS``: pinned ones first,
    then the best matches (each at least ``NOTE_FLOOR`` of the best); None when there
    are none."""
    budget = ctx.deps.settings.memory_prompt_chars
    shown: list[Fact] = list(pinned)
    top = hits[0].score if hits else 0.0
    shown += [h.fact for h in hits if h.score >= top * NOTE_FLOOR]
    lines: list[str] = []
    used = 0
    seen: set[str] = set()
    for fact in shown:
        if fact.id in seen:
            continue
        seen.add(fact.id)
        line = f"- {fact.id} ({day(fact.created_at, ctx)}): {for_model(fact.shown())}"
        if used + len(line) > budget:
            continue
        lines.append(line)
        used += len(line) + 1
    if not lines:
        return None
    return "## Saved facts that may bear on this (search_memory finds more)\n" + "\n".join(lines)


async def _update_db_schema(args: UpdateDbSchemaArgs, ctx: RunContext) -> ToolResult:
    """Kept whole, even when it describes a built-in collection: the built-in
    documentation is shown above it anyway, so nothing the model wrote is lost."""
    if len(args.schema_) > SCHEMA_LIMIT:
        raise ToolError("schema is over 8,000 characters; keep it a concise summary")
    await ctx.deps.instructions.set_db_schema(args.schema_)
    result: ToolResult = {"success": True, "length": len(args.schema_)}
    named = sorted({m.lower() for m in _REDEFINES.findall(args.schema_)})
    if named:
        result["note"] = (
            f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} built in and always "
            "documented above your text; your lines about them are kept as extra notes"
        )
    return result


SAVE_MEMORY = Tool(
    name="save_memory",
    description="Save one fact; replaces: id of the fact it corrects",
    args=SaveMemoryArgs,
    handler=_save_memory,
)
SEARCH_MEMORY = Tool(
    name="search_memory",
    description="Search saved facts and past chats before saying you don't know",
    args=SearchMemoryArgs,
    handler=_search_memory,
    writes=False,
)
FORGET_MEMORY = Tool(
    name="forget_memory",
    description="Forget facts by query or ids (m3,m7); history: true, also from past chats",
    args=ForgetMemoryArgs,
    handler=_forget_memory,
)
UPDATE_DB_SCHEMA = Tool(
    name="update_db_schema",
    description="Replace your notes on your ai_* collections; built-in ones are always documented.",
    args=UpdateDbSchemaArgs,
    handler=_update_db_schema,
)
