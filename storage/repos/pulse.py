"""The pulse's stored settings and counters: one ``settings`` document, ``_id: "pulse"``.

Read into a ``StoredPulse`` (a field that does not parse keeps its default, logged, so
one damaged field never stops the scheduler's loop) and written from a ``PulseChange``.
Every write is a ``$set``/``$inc`` of named fields, never a whole-document overwrite:
the model may change notes or settings during a pulse, and the run's own bookkeeping
(counters, timestamps) must not put the old values back. The pulse's plan (quiet
hours, the grid) is the scheduler's (``scheduler.pulse``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum
from typing import TypeVar

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage import retry
from storage.records import BadRecord, Doc, maybe_text, moment, text, whole

log = logging.getLogger(__name__)
T = TypeVar("T")
PULSE_ID = "pulse"


class Keep(Enum):
    """A field a ``PulseChange`` leaves as stored (None is a value: "no pause")."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True)
class StoredPulse:
    """The pulse's settings and counters as stored."""

    enabled: bool = True
    pulses_per_day: int = 12
    active_days: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
    notes: str = ""
    done_today: int = 0
    done_day: str | None = None
    """The local date (ISO) ``done_today`` counts; another date means zero done."""
    last_pulse_at: datetime | None = None
    """When the model last ran for a pulse."""
    last_check_at: datetime | None = None
    """When a pulse last looked (idle or not): "since the last pulse" starts here."""
    next_pulse_at: datetime | None = None
    paused_until: datetime | None = None
    """No pulse before this moment; a moment past is no pause."""
    check_ins: bool = False
    """The owner asked for these check-ins: each pulse's final answer is sent to them
    (set from the owner's own chat, cleared when the pulse is turned off)."""

    @classmethod
    def from_doc(cls, doc: Doc | None) -> StoredPulse:
        """The stored pulse settings; a field that does not parse keeps its default
        (logged), so one damaged field never stops the scheduler's loop."""
        base = cls()
        if not doc:
            return base

        def read(name: str, parse: Callable[[Doc, str], T], default: T) -> T:
            try:
                return parse(doc, name)
            except BadRecord as exc:
                log.warning("stored pulse setting %s kept at its default: %s", name, exc)
                return default

        return cls(
            enabled=bool(doc.get("enabled", base.enabled)),
            pulses_per_day=read(
                "pulses_per_day", _whole_or(base.pulses_per_day), base.pulses_per_day
            ),
            active_days=read("active_days", _days, base.active_days),
            notes=read("notes", text, ""),
            done_today=read("done_today", whole, 0),
            done_day=read("done_day", maybe_text, None),
            last_pulse_at=read("last_pulse_at", moment, None),
            last_check_at=read("last_check_at", moment, None),
            next_pulse_at=read("next_pulse_at", moment, None),
            paused_until=read("paused_until", moment, None),
            check_ins=doc.get("check_ins") is True,
        )


def _whole_or(default: int) -> Callable[[Doc, str], int]:
    return lambda doc, name: whole(doc, name, default)


def _days(doc: Doc, name: str) -> tuple[int, ...]:
    value = doc.get(name)
    if value is None:
        return StoredPulse.active_days
    if not isinstance(value, list | tuple) or not all(
        isinstance(day, int) and not isinstance(day, bool) for day in value
    ):
        raise BadRecord(f"{name} is {value!r}, not a list of day numbers")
    return tuple(value)


@dataclass(frozen=True)
class PulseChange:
    """The fields one write sets; ``KEEP`` leaves a field as stored."""

    enabled: bool | Keep = KEEP
    pulses_per_day: int | Keep = KEEP
    active_days: tuple[int, ...] | Keep = KEEP
    notes: str | Keep = KEEP
    notes_updated_at: datetime | Keep = KEEP
    check_ins: bool | Keep = KEEP
    paused_until: datetime | Keep | None = KEEP
    next_pulse_at: datetime | Keep | None = KEEP
    last_check_at: datetime | Keep = KEEP
    updated_at: datetime | Keep = KEEP

    def fields(self) -> Doc:
        """The ``$set`` of this change (a list for ``active_days``, as stored)."""
        out: Doc = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not KEEP:
                out[item.name] = list(value) if isinstance(value, tuple) else value
        return out


class PulseRepo:
    """Every read and write of the pulse's document."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]

    async def read(self) -> StoredPulse:
        return StoredPulse.from_doc(await self._coll.find_one({"_id": PULSE_ID}))

    def change(self, change: PulseChange) -> Awaitable[bool]:
        """Set what ``change`` names (the document made if missing)."""
        return self._set(change.fields())

    def advance(self, expected: datetime | None, new: datetime | None) -> Awaitable[bool]:
        """Move the next pulse from ``expected`` to ``new`` unless it changed meanwhile."""
        return self._set({"next_pulse_at": new}, where={"next_pulse_at": expected})

    async def count_done(self, at: datetime, day: str) -> None:
        """Count one pulse at ``at`` on the local ``day`` (ISO; the first one of a day
        resets the count)."""
        # Each count carries a fresh token and applies only where it is not stored yet,
        # so a repeated write (a retry after a dropped connection) counts once.
        token = uuid.uuid4().hex
        stamp = {"last_pulse_at": at, "last_check_at": at, "pulse_token": token}
        once = {"done_day": day, "pulse_token": {"$ne": token}}
        if await self._set(stamp, inc={"done_today": 1}, where=once):
            return
        if await self._set(stamp, where={"done_day": day, "pulse_token": token}):
            return  # the first try counted it
        await self._set({**stamp, "done_day": day, "done_today": 1})

    async def _set(self, fields: Doc, inc: Doc | None = None, where: Doc | None = None) -> bool:
        defaults = {
            "enabled": StoredPulse.enabled,
            "pulses_per_day": StoredPulse.pulses_per_day,
            "active_days": list(StoredPulse.active_days),
            "notes": "",
        }
        update: Doc = {"$set": fields}
        on_insert = {k: v for k, v in defaults.items() if k not in fields and k not in (inc or {})}
        if on_insert:
            update["$setOnInsert"] = on_insert
        if inc:
            update["$inc"] = inc
        # Retried once on a dropped connection: every caller's change is a $set (or a
        # guarded $inc, see count_done), so applying it twice is applying it once.
        result = await retry.retried(
            lambda: self._coll.update_one(
                {"_id": PULSE_ID, **(where or {})}, update, upsert=where is None
            ),
            "update the pulse",
        )
        return result.matched_count == 1 or result.upserted_id is not None
