"""Recall: the facts and the past conversations, searchable by keyword (BM25).

One ``Recall`` per process (``AgentDeps.recall``) holds two indexes in memory
(``storage.text_search``): the facts not replaced, and the owner's past messages and
the agent's answers. Both are read from MongoDB, so a restart loses nothing:

* facts are loaded at first use and changed with every write made through here; a
  write by another process is noticed by the store's version (read at most every
  ``CHECK_EVERY``);
* messages are read once, at the first search (SecantusDB answers a range on ``_id``
  with a full scan, so catching up by reading costs as much as loading); after that
  ``MessageRepo`` tells it of each message it stores (``learn``). A contact's
  conversation is never indexed (its messages come in an untrusted block), nor a
  tool's call or result, nor the pulse's brief. Messages another process stores are
  seen at the next start.

Memory use is a few bytes a posting (about 5 MB for 50,000 messages); nothing is
loaded until the first search.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.ejson import aware
from storage.repos.memories import Fact, FactSource, MemoryStore
from storage.text_search import Bm25Index, Hit, terms

Doc = dict[str, Any]
UNTRUSTED_MARK = 'trust="untrusted"'
"""What a contact's stored message carries (``agent.llm.untrusted.UNTRUSTED``)."""
SKIPPED_KEYS = ("pulse",)
"""Conversation keys whose messages are not the owner's talk (the pulse's brief)."""
SNIPPET = 240
LOAD_BATCH = 500
CHECK_EVERY = timedelta(seconds=5)
"""How often the facts' version is read: a search costs no read in between."""


@dataclass(frozen=True)
class FactHit:
    fact: Fact
    score: float


@dataclass(frozen=True)
class MessageHit:
    id: ObjectId
    at: datetime | None
    channel: str
    who: str
    """``owner`` (their message) or ``watchkeeper`` (the agent's answer)."""
    snippet: str
    score: float


def message_text(doc: Mapping[str, Any]) -> str:
    """The words a stored user or assistant message carries (its text parts)."""
    parts = doc.get("parts") or ()
    return "\n".join(
        str(p.get("text") or "")
        for p in parts
        if isinstance(p, Mapping) and p.get("kind") == "text"
    ).strip()


def snippet(text: str, query_terms: set[str], width: int = SNIPPET) -> str:
    """The part of ``text`` around its first sentence holding a query term."""
    if len(text) <= width:
        return text
    sentences = re.split(r"(?<=[.!?\n])\s+", text)
    for index, sentence in enumerate(sentences):
        if query_terms & set(terms(sentence)):
            start = sum(len(s) + 1 for s in sentences[:index])
            piece = text[start : start + width]
            return ("…" if start else "") + piece.rstrip() + "…"
    return text[:width].rstrip() + "…"


class Recall:
    """The facts and past messages, searchable (module docstring)."""

    def __init__(self, db: AsyncDatabase[Doc], clock: Callable[[], datetime]) -> None:
        self.store = MemoryStore(db)
        self._clock = clock
        self._messages_coll = db[c.MESSAGES]
        self._conversations = db[c.CONVERSATIONS]
        self._facts: dict[str, Fact] = {}
        self._fact_index: Bm25Index[str] = Bm25Index()
        self._version: int | None = None
        self._message_index: Bm25Index[ObjectId] = Bm25Index()
        self._messages_loaded = False
        self._unplaced: dict[ObjectId, list[ObjectId]] = {}
        """Conversations of messages learnt since the last search, not yet looked up."""
        self._checked_at: datetime | None = None
        self._conversation_meta: dict[ObjectId, tuple[str, str]] = {}
        """conversation id -> (channel, key), for the conversations seen."""
        self._contact_conversations: set[ObjectId] = set()
        self._lock = asyncio.Lock()

    # Facts

    def _facts_fresh(self) -> bool:
        """Whether the facts' version was read within ``CHECK_EVERY`` (another
        process's change shows within it): no read is due."""
        now, checked = self._clock(), self._checked_at
        return (
            self._version is not None
            and checked is not None
            and checked <= now < checked + CHECK_EVERY
        )

    async def _sync_facts(self) -> None:
        if self._facts_fresh():
            return
        self._checked_at = self._clock()
        await self._reload(await self.store.version())

    async def _reload(self, version: int) -> None:
        """The facts read again when the store's ``version`` moved past ours."""
        if version == self._version:
            return
        async with self._lock:
            if version == self._version:
                return
            facts = await self.store.all()
            self._facts = {}
            self._fact_index = Bm25Index()
            for fact in facts:
                self._keep(fact)
            self._version = version

    def _keep(self, fact: Fact) -> None:
        if fact.status == "replaced":
            self._drop(fact.id)
            return
        self._facts[fact.id] = fact
        self._fact_index.add(fact.id, fact.text)

    def _drop(self, fact_id: str) -> None:
        self._facts.pop(fact_id, None)
        self._fact_index.remove(fact_id)

    async def _after_write(self) -> None:
        """Our own write: the version moved by one per change we made, so the facts in
        memory stay; another process's change since makes the next search reload."""
        self._version = await self.store.version()

    async def facts(self, query: str, limit: int = 5, *, stale: bool = True) -> list[FactHit]:
        """The facts best matching ``query`` (never a replaced one)."""
        await self._sync_facts()
        return self._search(query, limit, stale=stale)

    def _search(self, query: str, limit: int, *, stale: bool) -> list[FactHit]:
        hits = self._fact_index.search(query, limit * 2 + 5)
        found = [FactHit(self._facts[h.key], h.score) for h in hits if h.key in self._facts]
        if not stale:
            found = [h for h in found if h.fact.status == "active"]
        return found[:limit]

    async def pinned(self) -> list[Fact]:
        await self._sync_facts()
        return self._pinned()

    def _pinned(self) -> list[Fact]:
        return [f for f in self._facts.values() if f.pinned and f.status == "active"]

    async def for_note(self, words: str, limit: int) -> tuple[list[Fact], list[FactHit]]:
        """The pinned facts, and the active ones best matching ``words`` (none without
        words), for the memory note of every exchange: one look at the store's version,
        and only when one is due (``CHECK_EVERY``)."""
        if not self._facts_fresh():  # as ``_sync_facts``, one frame fewer on every exchange
            self._checked_at = self._clock()
            version = self.store.version_of(await self.store.read_version())
            if version != self._version:
                await self._reload(version)
        return self._pinned(), self._search(words, limit, stale=False) if words else []

    async def fact(self, fact_id: str) -> Fact | None:
        await self._sync_facts()
        return self._facts.get(fact_id)

    async def active_facts(self) -> list[Fact]:
        await self._sync_facts()
        return sorted(self._facts.values(), key=lambda f: f.created_at)

    async def save(
        self, text: str, source: FactSource, now: datetime, replaces: Fact | None = None
    ) -> Fact:
        await self._sync_facts()
        fact = await self.store.add(text, source, now, replaces=replaces)
        if replaces is not None:
            self._drop(replaces.id)
        self._keep(fact)
        await self._after_write()
        return fact

    async def update(self, fact_id: str, change: Doc, now: datetime) -> Fact | None:
        await self._sync_facts()
        fact = await self.store.update(fact_id, change, now)
        if fact is not None:
            self._keep(fact)
        await self._after_write()
        return fact

    async def delete(self, facts: Iterable[Fact]) -> list[Fact]:
        """Delete ``facts`` and every fact they replaced; the facts deleted."""
        await self._sync_facts()
        gone = await self.store.chain(facts)
        await self.store.delete(f.id for f in gone)
        for fact in gone:
            self._drop(fact.id)
        await self._after_write()
        return gone

    async def reload_facts(self) -> None:
        """Read every fact again at the next search (a restore, an upgrade)."""
        self._version = None

    def message_frequency(self, term: str) -> int:
        """In how many indexed messages ``term`` occurs (how identifying it is)."""
        return self._message_index.frequency(term)

    # Messages

    async def _catch_up(self) -> None:
        """Load every stored message once (one read of the collection); from then on the
        messages this process stores come through ``learn``. Then the conversations of
        newly learnt messages are looked up (a pulse's are dropped again)."""
        async with self._lock:
            if not self._messages_loaded:
                await self._learn_conversations(await self._conversations.distinct("_id"))
                projection = {"parts": 1, "role": 1, "conversation_id": 1}
                # Streamed in small batches: the peak stays a batch, not the collection.
                cursor = self._messages_coll.find({}, projection, batch_size=LOAD_BATCH)
                async for doc in cursor:
                    if doc.get("role") in ("user", "assistant"):
                        self._index_message(doc)
                self._messages_loaded = True
                self._unplaced.clear()
            if self._unplaced:
                pending, self._unplaced = self._unplaced, {}
                await self._learn_conversations(pending)
                for conversation, ids in pending.items():
                    _, key = self._conversation_meta.get(conversation, ("", ""))
                    if key.startswith(SKIPPED_KEYS):
                        for message_id in ids:
                            self._message_index.remove(message_id)

    def learn(self, conversation: ObjectId, docs: list[Doc]) -> None:
        """Messages just stored (``MessageRepo``'s listener); nothing before the first
        search, which loads them all."""
        if not self._messages_loaded:
            return
        for doc in docs:
            if doc.get("role") not in ("user", "assistant") or "_id" not in doc:
                continue
            self._index_message(doc)
            if conversation not in self._conversation_meta:
                self._unplaced.setdefault(conversation, []).append(doc["_id"])

    async def _learn_conversations(self, ids: Iterable[Any]) -> None:
        new = {i for i in ids if isinstance(i, ObjectId) and i not in self._conversation_meta}
        if not new:
            return
        async for doc in self._conversations.find(
            {"_id": {"$in": list(new)}}, {"channel": 1, "key": 1}
        ):
            self._conversation_meta[doc["_id"]] = (
                str(doc.get("channel") or ""),
                str(doc.get("key") or ""),
            )
        for missing in new - self._conversation_meta.keys():
            self._conversation_meta[missing] = ("", "")

    def _index_message(self, doc: Mapping[str, Any]) -> None:
        conversation = doc.get("conversation_id")
        _, key = (
            self._conversation_meta.get(conversation, ("", ""))
            if isinstance(conversation, ObjectId)
            else ("", "")
        )
        if key.startswith(SKIPPED_KEYS) or conversation in self._contact_conversations:
            return
        text = message_text(doc)
        if UNTRUSTED_MARK in text:
            if doc.get("role") == "user" and isinstance(conversation, ObjectId):
                self._contact_conversations.add(conversation)
            return
        if text:
            self._message_index.add(doc["_id"], text)

    async def reindex_messages(self, docs: Iterable[Mapping[str, Any]]) -> None:
        """Index ``docs`` again as they are now (after they were redacted)."""
        for doc in docs:
            self._message_index.remove(doc["_id"])
            if doc.get("role") in ("user", "assistant"):
                self._index_message(doc)

    async def message_ids(self, wanted: Iterable[str], limit: int = 100_000) -> list[ObjectId]:
        """Messages holding any of the terms ``wanted`` (the index's own terms)."""
        await self._catch_up()
        return [h.key for h in self._message_index.search(list(wanted), limit)]

    async def messages(self, query: str, limit: int = 5) -> list[MessageHit]:
        """The owner's past messages and the agent's answers best matching ``query``."""
        await self._catch_up()
        hits: list[Hit[ObjectId]] = self._message_index.search(query, limit)
        if not hits:
            return []
        ids = [h.key for h in hits]
        docs = {
            d["_id"]: d
            async for d in self._messages_coll.find(
                {"_id": {"$in": ids}},
                {"parts": 1, "role": 1, "conversation_id": 1, "created_at": 1},
            )
        }
        wanted = set(terms(query))
        found: list[MessageHit] = []
        for hit in hits:
            doc = docs.get(hit.key)
            if doc is None:
                continue
            channel, _ = self._conversation_meta.get(doc["conversation_id"], ("", ""))
            found.append(
                MessageHit(
                    id=hit.key,
                    at=aware(doc.get("created_at")),
                    channel=channel,
                    who="owner" if doc.get("role") == "user" else "watchkeeper",
                    snippet=snippet(message_text(doc), wanted),
                    score=hit.score,
                )
            )
        return found
