"""Repositories for the system instruction, conversations and messages.

Messages are stored as provider-neutral parts (plain dicts); the agent turns
them back into typed parts. Storage never imports the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from runtime.clock import utcnow
from storage import collections as c
from storage import retry
from storage.coalesce import GroupCommit, GroupLoad, TtlCache, insert_groups, own_copies
from storage.ejson import aware
from storage.redact import SWEPT_FIELD
from storage.repos.conversation_record import Conversation, StoredMessage, Summary

Doc = dict[str, Any]
REPLAY_LOOKBACK = 100
"""A conversation's newest messages read to find a replayed message's earlier answer:
the message itself and every step of its exchange (tool calls and results)."""
SYSTEM_INSTRUCTION_ID = "system_instruction"

DEFAULT_CORE_INSTRUCTION = (
    "You are Watchkeeper, the owner's personal agent. Be brief and concrete. Act on clear "
    "requests without asking; confirm before anything irreversible. Keep facts in memory, "
    "records in the database."
)
LEGACY_DB_SCHEMA = (
    "- master: one document, the owner's profile (name, city, preferences...)\n"
    "- contacts: name, phone, email, notes\n"
    "- schedule: title, start, end (dates), allDay, rrule, contactId, status\n"
    "- ai_*: your own collections; document them with update_db_schema"
)
"""What ``db_schema`` held before it documented only the model's own collections (the
built-in ones are now always shown by the prompt); read back as empty."""


@dataclass
class SystemInstruction:
    core_instruction: str = DEFAULT_CORE_INSTRUCTION
    memory_enabled: bool = True
    db_schema: str = ""
    """The model's documentation of its own collections (``update_db_schema``)."""


class SystemInstructionRepo:
    """Read on every exchange, written rarely: reads are cached for ``CACHE_SECONDS``
    and every write through this repository refreshes them at once."""

    CACHE_SECONDS = 2.0

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]
        self._cache: TtlCache[str, SystemInstruction] = TtlCache(self.CACHE_SECONDS)

    def get(self) -> Awaitable[SystemInstruction]:
        """The instruction (the cache's, ``TtlCache.read``: at once while fresh, else
        the database's answer, parsed)."""
        return self._cache.read(SYSTEM_INSTRUCTION_ID, self._query, self._parse)

    def _query(self) -> Awaitable[Doc | None]:
        return self._coll.find_one({"_id": SYSTEM_INSTRUCTION_ID})

    @staticmethod
    def _parse(doc: Doc | None) -> SystemInstruction:
        si = SystemInstruction()
        if doc:
            si.core_instruction = doc.get("core_instruction") or si.core_instruction
            si.memory_enabled = bool(doc.get("memory_enabled", True))
            own = str(doc.get("db_schema") or "")
            si.db_schema = "" if own.strip() == LEGACY_DB_SCHEMA else own
        return si

    async def _set(self, fields: Doc) -> None:
        fields = {**fields, "updated_at": utcnow()}
        await retry.retried(  # an upsert of $set by _id: safe to repeat
            lambda: self._coll.update_one(
                {"_id": SYSTEM_INSTRUCTION_ID}, {"$set": fields}, upsert=True
            ),
            "save settings",
        )
        self._cache.invalidate()

    async def set_db_schema(self, schema: str) -> None:
        await self._set({"db_schema": schema})

    async def set_core_instruction(self, text: str) -> None:
        await self._set({"core_instruction": text})

    async def set_memory_enabled(self, enabled: bool) -> None:
        await self._set({"memory_enabled": enabled})


MAX_CREATED = 10_000
"""Bound on ``ConversationRepo``'s just-created set (a conversation left out only costs
its first exchange one history read)."""


def _stored_now() -> datetime:
    """Now, to the millisecond (as a stored date comes back)."""
    now = utcnow()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


class ConversationRepo:
    """A conversation key (``telegram:42``, ``console:owner``, ``cron:<id>``) maps to one
    active conversation; ``reset`` closes it so the next message starts a new one."""

    CACHE_SECONDS = 10.0

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.CONVERSATIONS]
        self._cache: TtlCache[str, Conversation] = TtlCache(self.CACHE_SECONDS)
        self._created: set[ObjectId] = set()
        """Conversations this process just created, until ``take_created`` is asked."""
        # Chats whose messages arrive together open their conversations in one batch.
        self._open = GroupLoad(self.open, self._load_many)

    def take_created(self, conversation_id: ObjectId) -> bool:
        """True once for a conversation ``active`` has just created: it has no messages
        yet, so its first exchange need not read its history."""
        if conversation_id in self._created:
            self._created.discard(conversation_id)
            return True
        return False

    def active(self, key: str, **meta: Any) -> Awaitable[Conversation]:
        """The conversation messages for ``key`` go to (created on first use).

        Cached briefly (``TtlCache.get``: at once while fresh): a ``reset`` through this
        repository takes effect at once, one made by another process within
        ``CACHE_SECONDS``.
        """
        return self._cache.get(key, lambda: self._open(key, meta))

    async def open(self, key: str, meta: dict[str, Any]) -> Conversation:
        """The conversation for ``key`` read from the database (created on first use),
        past the cache: for a run whose reads come minutes apart and one at a time (a
        scheduled run), where the cache and the batching add only a wait."""
        now = _stored_now()
        update = {"$setOnInsert": {"created_at": now, **meta}, "$set": {"touched_at": now}}
        # An upsert: a repeat matches the conversation the first try made.
        doc = await retry.retried(
            lambda: self._coll.find_one_and_update(
                {"key": key, "active": True},
                update,
                upsert=True,
                return_document=ReturnDocument.AFTER,
            ),
            "open a conversation",
        )
        assert doc is not None
        conversation = Conversation.from_doc(doc)
        if aware(doc.get("created_at")) == now:
            self._note_created(conversation.id)  # this very call inserted it
        return conversation

    async def _load_many(
        self, items: Sequence[tuple[str, dict[str, Any]]]
    ) -> dict[str, Conversation]:
        """Several keys at once: one find, one touch, one insert of the missing ones.

        Like the upsert of ``open``, it relies on one writer per key (the pipeline
        handles a chat's messages in order)."""
        now = _stored_now()
        keys = [key for key, _meta in items]
        found: dict[str, Doc] = {}
        query = {"key": {"$in": keys}, "active": True}
        async for doc in self._coll.find(query):
            found.setdefault(doc["key"], doc)
        if found:
            ids = [doc["_id"] for doc in found.values()]
            await retry.retried(  # a $set: safe to repeat
                lambda: self._coll.update_many(
                    {"_id": {"$in": ids}}, {"$set": {"touched_at": now}}
                ),
                "touch conversations",
            )
        fresh = [
            {"key": key, "active": True, "created_at": now, **meta, "touched_at": now}
            for key, meta in items
            if key not in found
        ]
        await retry.insert_many(self._coll, fresh, ordered=False)
        for doc in fresh:
            found[doc["key"]] = doc
            self._note_created(doc["_id"])
        return {key: Conversation.from_doc(doc) for key, doc in found.items()}

    def _note_created(self, conversation_id: ObjectId) -> None:
        if len(self._created) < MAX_CREATED:
            self._created.add(conversation_id)

    async def summary(self, conversation_id: ObjectId) -> tuple[Summary | None, int]:
        """The running summary of ``conversation_id`` as stored now (``save_summary``),
        and how many redaction sweeps it has seen (pass it back to ``save_summary``)."""
        doc = await self._coll.find_one({"_id": conversation_id}, {"summary": 1, SWEPT_FIELD: 1})
        found = Summary.of((doc or {}).get("summary"))
        return found, int((doc or {}).get(SWEPT_FIELD) or 0)

    async def save_summary(
        self,
        key: str,
        conversation_id: ObjectId,
        text: str,
        through_seq: int,
        after: int | None,
        sweeps: int = 0,
    ) -> bool:
        """Store the running summary of ``conversation_id`` (``key``'s) as covering its
        messages up to ``through_seq``, only if the stored one still ends at ``after``
        (None: none yet), so two summaries never overwrite each other, and only if no
        redaction swept the history since it was read (``sweeps``, from ``summary``):
        a summary of words since forgotten is dropped. True when stored."""
        held: Any = after if after is not None else {"$exists": False}
        swept: Any = sweeps if sweeps else {"$exists": False}
        match = {"_id": conversation_id, "summary.through_seq": held, SWEPT_FIELD: swept}
        summary = {"text": text, "through_seq": through_seq, "at": utcnow()}
        done = await retry.retried(  # a $set: safe to repeat
            lambda: self._coll.update_one(match, {"$set": {"summary": summary}}),
            "save a conversation summary",
        )
        self._cache.invalidate(key)  # the next exchange reads it
        return done.matched_count == 1

    def refresh(self) -> None:
        """Read every conversation afresh next time (their summaries were redacted)."""
        self._cache.invalidate()

    async def reset(self, key: str) -> None:
        await retry.retried(  # a $set: safe to repeat
            lambda: self._coll.update_many(
                {"key": key, "active": True}, {"$set": {"active": False, "closed_at": utcnow()}}
            ),
            "reset a conversation",
        )
        self._cache.invalidate(key)


AppendListener = Callable[[ObjectId, list[Doc]], None]
"""Told of each conversation's messages once stored (``storage.recall`` indexes them)."""


class MessageRepo:
    def __init__(self, db: AsyncDatabase[Doc], listener: AppendListener | None = None) -> None:
        self._coll = db[c.MESSAGES]
        # Exchanges of different chats ending together share one insert command.
        self._insert = GroupCommit(insert_groups(self._coll))
        self._listener = listener

    async def append(
        self,
        conversation_id: ObjectId,
        messages: list[Doc],
        start_seq: int | None = None,
        *,
        alone: bool = False,
    ) -> None:
        """Append turns in order; ``seq`` is unique per conversation.

        Callers that just read the tail pass ``start_seq`` and save a round trip.
        One writer per conversation (the pipeline serialises it), so seqs never
        clash; if they did, the unique index raises rather than interleaving turns.
        ``alone``: in an insert of its own, past the group commit (a scheduled run's
        exchange, minutes from the next: nothing to share a command with).
        """
        if not messages:
            return
        if start_seq is None:
            last = await self._coll.find_one(
                {"conversation_id": conversation_id}, sort=[("seq", -1)], projection={"seq": 1}
            )
            start_seq = int(last["seq"]) + 1 if last else 0
        now = utcnow()
        docs = [
            {
                "_id": ObjectId(),
                **m,
                "conversation_id": conversation_id,
                "seq": start_seq + i,
                "created_at": now,
            }
            for i, m in enumerate(messages)
        ]
        if alone:
            try:  # a repeat stores what is missing (each document has its _id)
                await retry.retried(
                    lambda: self._coll.insert_many(docs, ordered=False), "store messages"
                )
            except BulkWriteError as exc:
                if errors := [e for e in await own_copies(self._coll, docs, exc) if e]:
                    raise errors[0] from exc
        else:
            await self._insert(docs)  # a retry adds only what is missing
        if self._listener is not None:
            self._listener(conversation_id, docs)

    async def answer_for(self, conversation_id: ObjectId, inbox_id: str) -> str | None:
        """The stored final answer to inbound message ``inbox_id``, if it was answered.

        Read from the conversation's newest messages (its (conversation_id, seq) index):
        a replayed message is the last its conversation handled, since one writer per
        conversation takes messages in order and a replay comes before anything newer.
        No index on ``inbox_id``, which every message stored would pay for."""
        cursor = self._coll.find(
            {"conversation_id": conversation_id}, sort=[("seq", -1)], limit=REPLAY_LOOKBACK
        )
        after: list[Doc] = []  # newest first, until the message asked
        async for doc in cursor:
            if doc.get("inbox_id") == inbox_id and doc["role"] == "user":
                break
            after.append(doc)
        else:
            return None
        answer: str | None = None
        for doc in reversed(after):
            if doc["role"] == "user":
                break
            if doc.get("error"):
                return None
            texts = [p.get("text", "") for p in doc.get("parts", []) if p.get("kind") == "text"]
            if doc["role"] == "assistant" and texts:
                answer = "".join(texts)
        return answer

    async def recent(self, conversation_id: ObjectId, limit: int = 200) -> list[StoredMessage]:
        """The conversation's newest ``limit`` messages, oldest first."""
        cursor = self._coll.find(
            {"conversation_id": conversation_id}, sort=[("seq", -1)], limit=limit
        )
        docs = await cursor.to_list()
        return [StoredMessage.from_doc(doc) for doc in reversed(docs)]
