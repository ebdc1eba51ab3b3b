"""The ``memories`` collection: one fact about the owner per record.

A fact is read into a ``Fact`` here and nowhere else. It keeps where it came from
(``FactSource``: the owner's own run, or a run that had read outside text, and then
which text and the owner's approval code) and when it was saved. A correction
(``replaces``) keeps the corrected fact with status ``replaced`` and the id of the one
that replaced it, so the owner can see the history on the dashboard; nothing shows a
replaced fact to the model again. ``forget`` deletes. The collection is protected
(``storage.collections.PROTECTED``): only the memory tools and the dashboard write it.

Ids are short (``m12``): the model reads and writes them, and a 24-digit ObjectId
costs tokens in every note. A counter document in ``settings`` hands them out and
counts every change (``version``), so another process's write is noticed by a reader
that keeps facts in memory (``storage.recall``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.ejson import aware
from storage.outside import Outside
from storage.repos.provenance import OUTSIDE_TEXT, Provenance

Doc = dict[str, Any]
FACT_LIMIT = 500
"""Characters in one fact (DESIGN.md, ``save_memory``)."""
COUNTER_ID = "memory_counter"
"""The ``settings`` document that hands out fact ids and counts changes."""
Status = Literal["active", "replaced", "stale"]
BLOB_ID = "system_instruction"
"""Where the one-blob memory of earlier versions was kept (``settings``, ``memory``)."""


class FactTooLong(ValueError):
    pass


@dataclass(frozen=True)
class FactSource:
    """Whose words a fact is: the owner's (``outside`` empty), or a run's that had read
    outside text (``outside``: what it read; ``approved``: the owner's code)."""

    outside: tuple[str, ...] = ()
    approved: str | None = None

    @property
    def is_outside(self) -> bool:
        return bool(self.outside)

    @classmethod
    def of(cls, provenance: Provenance | None) -> FactSource:
        """From ``agent.tools.held.provenance`` (None: the owner's own run)."""
        if provenance is None:
            return cls()
        return cls(provenance.untrusted or (OUTSIDE_TEXT,), provenance.approved)

    def doc(self) -> Doc:
        if not self.outside:
            return {"kind": "owner"}
        return {"kind": "outside", "read": list(self.outside), "approved": self.approved}

    @classmethod
    def from_doc(cls, doc: Any) -> FactSource:
        if not isinstance(doc, Mapping) or doc.get("kind") != "outside":
            return cls()
        read = tuple(str(r) for r in doc.get("read") or ()) or ("outside text",)
        approved = doc.get("approved")
        return cls(read, str(approved) if approved is not None else None)

    def words(self) -> str:
        """The source in a few words, for the model and the dashboard."""
        if not self.outside:
            return "owner"
        read = "; ".join(self.outside)[:160]
        return f"outside text ({read})" + (f", approved {self.approved}" if self.approved else "")


@dataclass(frozen=True)
class Fact:
    id: str
    text: str
    source: FactSource
    created_at: datetime
    updated_at: datetime
    status: Status = "active"
    replaced_by: str | None = None
    replaces: str | None = None
    pinned: bool = False
    note: str = ""
    """Why consolidation marked it (``stale``: a past date), or ""."""
    history: tuple[str, ...] = field(default=())
    """Earlier texts of a fact the owner edited on the dashboard (never shown to the model)."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Fact:
        created = aware(doc.get("created_at"))
        updated = aware(doc.get("updated_at")) or created
        assert created is not None and updated is not None
        status = doc.get("status")
        return cls(
            id=str(doc["_id"]),
            text=str(doc.get("text") or ""),
            source=FactSource.from_doc(doc.get("source")),
            created_at=created,
            updated_at=updated,
            status=status if status in ("active", "replaced", "stale") else "active",
            replaced_by=doc.get("replaced_by"),
            replaces=doc.get("replaces"),
            pinned=bool(doc.get("pinned")),
            note=str(doc.get("note") or ""),
            history=tuple(str(h) for h in doc.get("history") or ()),
        )

    def shown(self) -> str | Outside:
        """The text as the model may read it: outside words stay an ``Outside``."""
        if self.source.is_outside:
            return Outside(self.text, "a saved fact from " + "; ".join(self.source.outside))
        return self.text


def check_text(text: str) -> str:
    """``text`` as stored (spaces trimmed and runs of blanks joined), or FactTooLong."""
    stored = re.sub(r"[ \t]+", " ", text).strip()
    if not stored:
        raise FactTooLong("the fact is empty; send one fact in a sentence")
    if len(stored) > FACT_LIMIT:
        raise FactTooLong(
            f"the fact is {len(stored)} characters; the limit is {FACT_LIMIT}. Save one fact "
            "per call, in fewer words."
        )
    return stored


class MemoryStore:
    """Facts in ``memories``: every write goes through here and bumps the version."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.MEMORIES]
        self._settings = db[c.SETTINGS]

    async def version(self) -> int:
        """How many changes the facts have seen (a reader's memory is stale when it
        moved)."""
        return self.version_of(await self.read_version())

    def read_version(self) -> Awaitable[Doc | None]:
        """The read of ``version``, the driver's own awaitable, for a caller on every
        exchange (``Recall.for_note``) that parses it itself (``version_of``)."""
        return self._settings.find_one({"_id": COUNTER_ID}, {"version": 1})

    @staticmethod
    def version_of(doc: Doc | None) -> int:
        return int(doc.get("version") or 0) if doc else 0

    async def _bump(self, ids: int = 0) -> tuple[int, int]:
        """Count a change (and hand out ``ids`` new numbers): (first new number, version)."""
        doc = await self._settings.find_one_and_update(
            {"_id": COUNTER_ID},
            {"$inc": {"seq": ids, "version": 1}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return int(doc["seq"]) - ids + 1, int(doc["version"])

    async def add(
        self,
        text: str,
        source: FactSource,
        now: datetime,
        *,
        replaces: Fact | None = None,
        extra: Doc | None = None,
    ) -> Fact:
        """Store ``text`` (checked: ``check_text``) as a new active fact; ``replaces``
        becomes ``replaced`` by it."""
        stored = check_text(text)
        number, _ = await self._bump(ids=1)
        doc: Doc = {
            "_id": f"m{number}",
            "text": stored,
            "source": source.doc(),
            "status": "active",
            "created_at": now,
            "updated_at": now,
            **(extra or {}),
        }
        if replaces is not None:
            doc["replaces"] = replaces.id
        await self._coll.insert_one(doc)
        if replaces is not None:
            await self._coll.update_one(
                {"_id": replaces.id},
                {"$set": {"status": "replaced", "replaced_by": doc["_id"], "updated_at": now}},
            )
        return Fact.from_doc(doc)

    async def get(self, ids: Iterable[str]) -> list[Fact]:
        wanted = list(dict.fromkeys(ids))
        found = {
            d["_id"]: Fact.from_doc(d) async for d in self._coll.find({"_id": {"$in": wanted}})
        }
        return [found[i] for i in wanted if i in found]

    async def all(self) -> list[Fact]:
        """Every fact, replaced ones included, oldest first."""
        return [Fact.from_doc(d) async for d in self._coll.find({}, sort=[("created_at", 1)])]

    async def chain(self, facts: Iterable[Fact]) -> list[Fact]:
        """``facts`` and every fact they replaced, however far back."""
        found = {f.id: f for f in facts}
        todo = [f.replaces for f in found.values() if f.replaces]
        while todo:
            more = await self.get(i for i in todo if i not in found)
            for fact in more:
                found[fact.id] = fact
            todo = [f.replaces for f in more if f.replaces and f.replaces not in found]
        return list(found.values())

    async def delete(self, ids: Iterable[str]) -> int:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        result = await self._coll.delete_many({"_id": {"$in": wanted}})
        await self._bump()
        return result.deleted_count

    async def update(self, fact_id: str, change: Doc, now: datetime) -> Fact | None:
        """Set ``change`` on a fact (text checked); None when there is no such fact."""
        change = {**change, "updated_at": now}
        if "text" in change:
            change["text"] = check_text(str(change["text"]))
        old = await self._coll.find_one_and_update(
            {"_id": fact_id}, {"$set": change}, return_document=ReturnDocument.BEFORE
        )
        if old is None:
            return None
        if "text" in change and old.get("text") != change["text"]:
            await self._coll.update_one({"_id": fact_id}, {"$push": {"history": old.get("text")}})
        await self._bump()
        found = await self.get([fact_id])
        return found[0] if found else None

    async def restore(self, docs: Iterable[Doc]) -> None:
        """Put stored documents back as they were (an undone consolidation)."""
        for doc in docs:
            await self._coll.replace_one({"_id": doc["_id"]}, doc, upsert=True)
        await self._bump()

    async def raw(self, ids: Iterable[str]) -> list[Doc]:
        return [d async for d in self._coll.find({"_id": {"$in": list(ids)}})]

    async def upgrade_blob(self, now: datetime) -> int:
        """Turn the one-blob memory of earlier versions into facts, one per line (a long
        line one per sentence), nothing dropped: a piece over the limit is split at
        words. The blob is kept under ``memory_before_facts``. Repeatable: a start that
        stopped half-way finds the pieces it stored by their number."""
        doc = await self._settings.find_one({"_id": BLOB_ID}, {"memory": 1, "memory_source": 1})
        blob = str((doc or {}).get("memory") or "")
        if not blob.strip():
            return 0
        source = FactSource.of((doc or {}).get("memory_source"))
        pieces = blob_pieces(blob)
        for index, piece in enumerate(pieces):
            if await self._coll.find_one({"from_blob": index}, {"_id": 1}):
                continue
            await self.add(piece, source, now, extra={"from_blob": index})
        await self._settings.update_one(
            {"_id": BLOB_ID},
            {"$set": {"memory_before_facts": blob}, "$unset": {"memory": "", "memory_source": ""}},
        )
        return len(pieces)


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")


def blob_pieces(blob: str) -> list[str]:
    """The facts of an old memory blob: its lines, bullets dropped; a line over the
    limit split into sentences, and a sentence over it at words."""
    pieces: list[str] = []
    for line in blob.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line or set(line) <= set("#-=*_ "):
            continue
        parts = [line] if len(line) <= FACT_LIMIT else _SENTENCE.split(line)
        for part in parts:
            while len(part) > FACT_LIMIT:
                cut = part.rfind(" ", 0, FACT_LIMIT)
                cut = cut if cut > 0 else FACT_LIMIT
                pieces.append(part[:cut].strip())
                part = part[cut:].strip()
            if part:
                pieces.append(part)
    return pieces
