"""The pulse's settings and counters: one ``settings`` document, ``_id: "pulse"``.

Quiet hours and the timezone are the owner's (``manage_settings``): the pulse reads
them through an ``OwnerClock`` (the owner's settings, ``agent.owner.OwnerSettings``,
handed in by the composition root, so the scheduler never imports the agent). A
``PulseState`` carries the owner's quiet hours as read, and a change to them re-plans
the next pulse at once.

Every write is a ``$set``/``$inc`` of named fields, never a whole-document overwrite:
the model may change notes or settings during a pulse, and the run's own bookkeeping
(counters, timestamps) must not put the old values back.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal, Protocol, TypeVar
from zoneinfo import ZoneInfo

from pymongo.asynchronous.database import AsyncDatabase

from runtime.clock import Clock
from runtime.listeners import Listeners
from scheduler.pulse.grid import (
    DEFAULT_QUIET,
    PulseConfigError,
    PulseSchedule,
    QuietHours,
    local_day,
    make_schedule,
    next_pulse,
)
from storage import collections as c
from storage import retry
from storage.coalesce import TtlCache
from storage.records import BadRecord, Doc, maybe_text, moment, text, whole

log = logging.getLogger(__name__)
T = TypeVar("T")
Listener = Callable[[], Awaitable[None]]
PULSE_ID = "pulse"
NOTES_LIMIT = 2_000


class OwnerHours(Protocol):
    """The owner's settings the pulse depends on."""

    @property
    def timezone(self) -> str: ...

    @property
    def quiet_hours(self) -> tuple[QuietHours, ...]: ...


class OwnerClock(Protocol):
    """Where the owner's timezone and quiet hours are kept, current."""

    @property
    def tz(self) -> ZoneInfo:
        """The owner's timezone now."""
        ...

    async def load(self) -> OwnerHours:
        """Re-read from the database (start-up, resync)."""
        ...

    async def fresh(self) -> OwnerHours:
        """The settings, re-read when a little old (cheap enough for every read)."""
        ...

    def listen(self, listener: Callable[[OwnerHours, OwnerHours], Awaitable[None]]) -> None:
        """Call ``listener`` with (old, new) after every stored change."""
        ...


@dataclass(frozen=True)
class PulseState:
    enabled: bool = True
    pulses_per_day: int = 12
    active_days: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
    quiet_hours: tuple[QuietHours, ...] = DEFAULT_QUIET
    """The owner's quiet hours (``OwnerClock``), not stored with the pulse."""
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
    def from_doc(cls, doc: Doc | None, owner: OwnerHours | None = None) -> PulseState:
        """The stored pulse settings; a field that does not parse keeps its default
        (logged), so one damaged field never stops the scheduler's loop."""
        base = cls()
        quiet = base.quiet_hours if owner is None else tuple(owner.quiet_hours)
        if not doc:
            return cls(quiet_hours=quiet)

        def read(name: str, parse: Callable[[Doc, str], T], default: T) -> T:
            try:
                return parse(doc, name)
            except BadRecord as exc:
                log.warning("stored pulse setting %s kept at its default: %s", name, exc)
                return default

        days = read("active_days", _days, base.active_days)
        return cls(
            enabled=bool(doc.get("enabled", base.enabled)),
            pulses_per_day=read(
                "pulses_per_day", _whole_or(base.pulses_per_day), base.pulses_per_day
            ),
            active_days=days,
            quiet_hours=quiet,
            notes=read("notes", text, ""),
            done_today=read("done_today", whole, 0),
            done_day=read("done_day", maybe_text, None),
            last_pulse_at=read("last_pulse_at", moment, None),
            last_check_at=read("last_check_at", moment, None),
            next_pulse_at=read("next_pulse_at", moment, None),
            paused_until=read("paused_until", moment, None),
            check_ins=doc.get("check_ins") is True,
        )

    def schedule(self, tz: ZoneInfo) -> PulseSchedule:
        return make_schedule(
            enabled=self.enabled,
            pulses_per_day=self.pulses_per_day,
            active_days=self.active_days,
            quiet_hours=list(self.quiet_hours),
            tz=tz,
            paused_until=self.paused_until,
        )

    def paused_at(self, now: datetime) -> bool:
        """Whether the pulse is paused at ``now`` (``paused_until`` still ahead)."""
        return self.paused_until is not None and self.paused_until > now

    def done_on(self, day: date) -> int:
        """Pulses done on a local day: the counter resets when the day changes."""
        return self.done_today if self.done_day == day.isoformat() else 0


def _whole_or(default: int) -> Callable[[Doc, str], int]:
    return lambda doc, name: whole(doc, name, default)


def _days(doc: Doc, name: str) -> tuple[int, ...]:
    value = doc.get(name)
    if value is None:
        return PulseState.active_days
    if not isinstance(value, list | tuple) or not all(
        isinstance(day, int) and not isinstance(day, bool) for day in value
    ):
        raise BadRecord(f"{name} is {value!r}, not a list of day numbers")
    return tuple(value)


def check_notes(notes: str) -> str:
    if len(notes) > NOTES_LIMIT:
        raise PulseConfigError(
            f"notes are {len(notes)} characters; the limit is {NOTES_LIMIT}. Nothing was "
            "saved: condense them and save again."
        )
    return notes


MAX_PAUSE = timedelta(days=90)
"""The longest pause ``paused_until`` may set."""


class PulseStore:
    CACHE_SECONDS = 2.0
    KNOWN_SECONDS = 90.0
    """How long the state last read serves the prompt's pulse line from memory (the
    engine's resync reads it every minute; a change through this store drops it at
    once, one by another process shows within this)."""

    def __init__(self, db: AsyncDatabase[Doc], clock: Clock, owner: OwnerClock) -> None:
        """``owner`` gives the quiet hours and timezone, and says when they change."""
        self._coll = db[c.SETTINGS]
        self._clock = clock
        self.owner = owner
        owner.listen(self._owner_changed)
        self.listeners: Listeners[Listener] = Listeners()
        self._cache: TtlCache[str, PulseState] = TtlCache(self.CACHE_SECONDS)
        self._known: tuple[float, PulseState] | None = None
        """The state last read, and when (``time.monotonic``)."""
        self._writes = 0
        """Changes made through this store: a read begun before one is not kept."""

    @property
    def tz(self) -> ZoneInfo:
        """The owner's timezone: the pulse grid is on the owner's wall clock."""
        return self.owner.tz

    async def get(self) -> PulseState:
        writes = self._writes
        owner = await self.owner.fresh()
        state = PulseState.from_doc(await self._coll.find_one({"_id": PULSE_ID}), owner)
        if writes == self._writes:  # no change through this store meanwhile
            self._known = (time.monotonic(), state)
        return state

    def known(self) -> PulseState | None:
        """The state last read, while at most ``KNOWN_SECONDS`` old and unchanged by
        this store since (the prompt's pulse line, from memory); else None."""
        if self._known is None or time.monotonic() - self._known[0] >= self.KNOWN_SECONDS:
            return None
        return self._known[1]

    def cached(self) -> Awaitable[PulseState]:
        """``get`` for display on every exchange (the prompt's pulse section): at most
        ``CACHE_SECONDS`` old (at once while fresh); the engine's decisions always use
        ``get``."""
        return self._cache.get(PULSE_ID, self.get)

    async def _set(self, fields: Doc, inc: Doc | None = None, where: Doc | None = None) -> bool:
        defaults = {
            "enabled": PulseState.enabled,
            "pulses_per_day": PulseState.pulses_per_day,
            "active_days": list(PulseState.active_days),
            "notes": "",
        }
        update: Doc = {"$set": fields}
        on_insert = {k: v for k, v in defaults.items() if k not in fields and k not in (inc or {})}
        if on_insert:
            update["$setOnInsert"] = on_insert
        if inc:
            update["$inc"] = inc
        # Retried once on a dropped connection: every caller's change is a $set (or a
        # guarded $inc, see record_done), so applying it twice is applying it once.
        result = await retry.retried(
            lambda: self._coll.update_one(
                {"_id": PULSE_ID, **(where or {})}, update, upsert=where is None
            ),
            "update the pulse",
        )
        self._writes += 1
        self._known = None
        self._cache.invalidate()
        return result.matched_count == 1 or result.upserted_id is not None

    async def _owner_changed(self, old: OwnerHours, new: OwnerHours) -> None:
        """New quiet hours or timezone: the next pulse is planned again from now."""
        if old.quiet_hours == new.quiet_hours and old.timezone == new.timezone:
            return
        state = await self.get()
        await self._set({"next_pulse_at": next_pulse(state.schedule(self.tz), self._clock())})
        await self._changed()

    async def _changed(self) -> None:
        for listener in self.listeners:
            try:
                await listener()
            except Exception:
                log.exception("pulse change listener failed")

    async def update_config(
        self,
        *,
        enabled: bool | None = None,
        active_days: Sequence[int] | None = None,
        pulses_per_day: int | None = None,
        paused_until: datetime | Literal["unchanged"] | None = "unchanged",
        check_ins: bool | None = None,
    ) -> PulseState:
        """Validate the merged settings as a whole, then store only what changed.
        ``paused_until``: no pulse before then (None or a moment past: no pause; at most
        ``MAX_PAUSE`` ahead). ``check_ins``: True when the owner asked for this pulse;
        turning the pulse off always clears it."""
        current, now = await self.get(), self._clock()
        pause = current.paused_until if paused_until == "unchanged" else paused_until
        if pause is not None and pause > now + MAX_PAUSE:
            days = MAX_PAUSE.days
            raise PulseConfigError(
                f"paused_until is at most {days} days ahead; got {pause:%Y-%m-%d}"
            )
        if pause is not None and pause <= now:
            pause = None  # a moment past pauses nothing: the pulse runs as set
        schedule = make_schedule(
            enabled=current.enabled if enabled is None else enabled,
            pulses_per_day=current.pulses_per_day if pulses_per_day is None else pulses_per_day,
            active_days=current.active_days if active_days is None else active_days,
            quiet_hours=list(current.quiet_hours),
            tz=self.tz,
            paused_until=pause,
        )
        fields: Doc = {"updated_at": now}
        if paused_until != "unchanged":
            fields["paused_until"] = pause
        if enabled is not None:
            fields["enabled"] = schedule.enabled
        if enabled is False:
            fields["check_ins"] = False
        elif check_ins is not None:
            fields["check_ins"] = check_ins
        if pulses_per_day is not None:
            fields["pulses_per_day"] = schedule.pulses_per_day
        if active_days is not None:
            fields["active_days"] = sorted(schedule.active_days)
        fields["next_pulse_at"] = next_pulse(schedule, now)
        await self._set(fields)
        await self._changed()
        return await self.get()

    async def update_notes(self, notes: str, *, check_ins: bool | None = None) -> PulseState:
        """Store the notes; ``check_ins`` True when the owner asked for them."""
        fields: Doc = {"notes": check_notes(notes), "notes_updated_at": self._clock()}
        if check_ins is not None:
            fields["check_ins"] = check_ins
        await self._set(fields)
        return await self.get()

    async def record_done(self, at: datetime) -> None:
        """Count one pulse on ``at``'s local day (the first one of a day resets the count)."""
        day = local_day(at, self.tz).isoformat()
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

    async def record_check(self, at: datetime) -> None:
        await self._set({"last_check_at": at})

    async def advance(self, expected: datetime | None, new: datetime | None) -> bool:
        """Move the next pulse from ``expected`` to ``new`` unless it changed meanwhile."""
        return await self._set({"next_pulse_at": new}, where={"next_pulse_at": expected})

    async def ensure_next(self, now: datetime) -> PulseState:
        """Give a fresh or disabled-then-enabled pulse a next slot to wait for."""
        state = await self.get()
        if state.next_pulse_at is None and state.enabled:
            await self._set({"next_pulse_at": next_pulse(state.schedule(self.tz), now)})
            state = await self.get()
        return state
