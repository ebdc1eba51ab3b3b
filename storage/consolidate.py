"""Consolidating the facts by rules, without a model, logged and undoable.

Two rules, each safe on its own:

* duplicates: facts whose words are the same (case, punctuation and spacing aside) or
  nearly (nine in ten of their terms shared, and the same identifying numbers) are
  merged into the newest one (an owner's own fact wins over one from outside text);
  the others become ``replaced`` by it, so the model never sees them again;
* stale: a fact whose every date (``2026-11-03``, ``3.11.2026``, ``3 November 2026``)
  has passed in the owner's timezone is marked ``stale`` with the date named; the
  note no longer carries it, a search still finds it, labelled.

Every fact changed is logged as it was before (``settings``, ``LOG_ID``): the last
consolidation can be undone whole from the dashboard. By itself it runs once a day, in
the owner's quiet hours (``consolidate_if_due``, from ``agent.app.features.memory``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.records import BadRecord, moment, parsed
from storage.repos.memories import Fact, MemoryStore
from storage.text_search import terms

Doc = dict[str, Any]
LOG_ID = "memory_consolidation"
RAN_ID = "memory_consolidation_ran"
"""When consolidation last ran by itself (whether or not it changed anything)."""
NEAR = 0.9
_MONTH_NAMES = """january february march april may june july august september october
november december"""
MONTHS = {m: i + 1 for i, m in enumerate(_MONTH_NAMES.split())}
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DOTTED = re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{4})\b")
_WORDS = re.compile(r"\b(\d{1,2}) (" + "|".join(MONTHS) + r") (\d{4})\b", re.IGNORECASE)


def dates_in(text: str) -> list[date]:
    found: list[date] = []
    for pattern, order in ((_ISO, "ymd"), (_DOTTED, "dmy"), (_WORDS, "dMy")):
        for match in pattern.finditer(text):
            a, b, y = match.groups() if order != "ymd" else (match[3], match[2], match[1])
            month = MONTHS[b.lower()] if order == "dMy" else int(b)
            try:
                found.append(date(int(y), month, int(a)))
            except ValueError:
                continue
    return found


def _key(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def _numbers(text: str) -> set[str]:
    return {t for t in terms(text) if t.isdigit()}


@dataclass(frozen=True)
class Change:
    fact: Fact
    status: str
    note: str
    replaced_by: str | None = None


def plan(facts: list[Fact], today: date) -> list[Change]:
    """What consolidation changes in ``facts`` (the active ones), by the rules above."""
    active = [f for f in facts if f.status == "active"]
    ranked = sorted(active, key=lambda f: (not f.source.is_outside, f.created_at), reverse=True)
    changes: list[Change] = []
    merged: set[str] = set()
    for i, keep in enumerate(ranked):
        if keep.id in merged:
            continue
        mine = set(terms(keep.text))
        for other in ranked[i + 1 :]:
            if other.id in merged:
                continue
            theirs = set(terms(other.text))
            overlap = len(mine & theirs) / max(len(mine | theirs), 1)
            same = _key(keep.text) == _key(other.text)
            if same or (overlap >= NEAR and _numbers(keep.text) == _numbers(other.text)):
                merged.add(other.id)
                note = f"merged into {keep.id} (duplicate)"
                changes.append(Change(other, "replaced", note, keep.id))
    for fact in active:
        if fact.id in merged:
            continue
        dates = dates_in(fact.text)
        if dates and max(dates) < today:
            changes.append(Change(fact, "stale", f"its date {max(dates).isoformat()} has passed"))
    return changes


async def consolidate(db: AsyncDatabase[Doc], now: datetime, tz: tzinfo) -> list[Change]:
    """Apply ``plan`` to the stored facts, logging each fact as it was (undoable)."""
    store = MemoryStore(db)
    changes = plan(await store.all(), now.astimezone(tz).date())
    if not changes:
        return []
    before = await store.raw(ch.fact.id for ch in changes)
    await db[c.SETTINGS].replace_one(
        {"_id": LOG_ID},
        {"_id": LOG_ID, "at": now, "before": before, "notes": [ch.note for ch in changes]},
        upsert=True,
    )
    for change in changes:
        fields: Doc = {"status": change.status, "note": change.note}
        if change.replaced_by:
            fields["replaced_by"] = change.replaced_by
        await store.update(change.fact.id, fields, now)
    return changes


@dataclass(frozen=True, slots=True)
class ConsolidationLog:
    """The last consolidation: when, what it did to each fact, and the facts as they
    were before it."""

    at: datetime | None
    notes: tuple[str, ...]
    before: tuple[Doc, ...]
    """Each changed fact's stored document as it was, put back as is by ``undo``."""

    @classmethod
    def from_doc(cls, doc: Doc) -> ConsolidationLog:
        before = doc.get("before") or ()
        if not isinstance(before, list | tuple) or not all(isinstance(d, dict) for d in before):
            raise BadRecord("before is not a list of documents")
        return cls(
            at=moment(doc, "at"),
            notes=tuple(str(note) for note in doc.get("notes") or ()),
            before=tuple(before),
        )


async def last_log(db: AsyncDatabase[Doc]) -> ConsolidationLog | None:
    """The last consolidation's log (None: none, or one that does not parse, logged)."""
    doc = await db[c.SETTINGS].find_one({"_id": LOG_ID})
    return None if doc is None else parsed(doc, ConsolidationLog.from_doc, "consolidation log")


async def undo(db: AsyncDatabase[Doc]) -> int:
    """Put back the facts the last consolidation changed; how many."""
    log = await last_log(db)
    if log is None:
        return 0
    await MemoryStore(db).restore(log.before)
    await db[c.SETTINGS].delete_one({"_id": LOG_ID})
    return len(log.before)


async def consolidate_if_due(
    db: AsyncDatabase[Doc], now: datetime, tz: tzinfo, quiet: bool
) -> list[Change] | None:
    """Consolidate when it is the owner's quiet time (``quiet``) and it has not run yet
    this local day; None when it was not due."""
    if not quiet:
        return None
    today = now.astimezone(tz).date().isoformat()
    ran = await db[c.SETTINGS].find_one_and_update(
        {"_id": RAN_ID}, {"$set": {"day": today, "at": now}}, upsert=True
    )
    if ran is not None and ran.get("day") == today:
        return None  # this day's run is done (or under way in another process)
    return await consolidate(db, now, tz)
