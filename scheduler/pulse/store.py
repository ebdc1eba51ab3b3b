"""The pulse's settings and counters: one ``settings`` document, ``_id: "pulse"``.

Quiet hours and the timezone are the owner's (``manage_settings``): the pulse reads
them through an ``OwnerClock`` (the owner's settings, ``agent.owner.OwnerSettings``,
handed in by the composition root, so the scheduler never imports the agent). A
``PulseState`` carries the owner's quiet hours as read, and a change to them re-plans
the next pulse at once.

The document itself is read and written by ``storage.repos.pulse`` (named fields
only, never a whole-document overwrite).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from datetime import date, datetime, timedelta
from typing import Literal, Protocol
from zoneinfo import ZoneInfo

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
from storage.coalesce import TtlCache
from storage.repos.pulse import KEEP, PULSE_ID, Keep, PulseChange, PulseRepo, StoredPulse

log = logging.getLogger(__name__)
Listener = Callable[[], Awaitable[None]]
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
class PulseState(StoredPulse):
    """The stored pulse with the owner's quiet hours, as the engine plans with it."""

    quiet_hours: tuple[QuietHours, ...] = DEFAULT_QUIET
    """The owner's quiet hours (``OwnerClock``), not stored with the pulse."""

    @classmethod
    def of(cls, stored: StoredPulse, owner: OwnerHours | None = None) -> PulseState:
        """``stored`` with ``owner``'s quiet hours (the defaults without an owner)."""
        quiet = DEFAULT_QUIET if owner is None else tuple(owner.quiet_hours)
        kept = {item.name: getattr(stored, item.name) for item in fields(StoredPulse)}
        return cls(**kept, quiet_hours=quiet)

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

    def __init__(self, repo: PulseRepo, clock: Clock, owner: OwnerClock) -> None:
        """``owner`` gives the quiet hours and timezone, and says when they change."""
        self._repo = repo
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
        state = PulseState.of(await self._repo.read(), owner)
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

    def _forget(self) -> None:
        """After a write through this store: the state read before it is not kept."""
        self._writes += 1
        self._known = None
        self._cache.invalidate()

    async def _owner_changed(self, old: OwnerHours, new: OwnerHours) -> None:
        """New quiet hours or timezone: the next pulse is planned again from now."""
        if old.quiet_hours == new.quiet_hours and old.timezone == new.timezone:
            return
        state = await self.get()
        next_at = next_pulse(state.schedule(self.tz), self._clock())
        await self._repo.change(PulseChange(next_pulse_at=next_at))
        self._forget()
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
        asked_in: bool | Keep = KEEP if check_ins is None else check_ins
        change = PulseChange(
            updated_at=now,
            paused_until=KEEP if paused_until == "unchanged" else pause,
            enabled=KEEP if enabled is None else schedule.enabled,
            check_ins=False if enabled is False else asked_in,
            pulses_per_day=KEEP if pulses_per_day is None else schedule.pulses_per_day,
            active_days=KEEP if active_days is None else tuple(sorted(schedule.active_days)),
            next_pulse_at=next_pulse(schedule, now),
        )
        await self._repo.change(change)
        self._forget()
        await self._changed()
        return await self.get()

    async def update_notes(self, notes: str, *, check_ins: bool | None = None) -> PulseState:
        """Store the notes; ``check_ins`` True when the owner asked for them."""
        change = PulseChange(
            notes=check_notes(notes),
            notes_updated_at=self._clock(),
            check_ins=KEEP if check_ins is None else check_ins,
        )
        await self._repo.change(change)
        self._forget()
        return await self.get()

    async def record_done(self, at: datetime) -> None:
        """Count one pulse on ``at``'s local day (the first one of a day resets the count)."""
        await self._repo.count_done(at, local_day(at, self.tz).isoformat())
        self._forget()

    async def record_check(self, at: datetime) -> None:
        await self._repo.change(PulseChange(last_check_at=at))
        self._forget()

    async def advance(self, expected: datetime | None, new: datetime | None) -> bool:
        """Move the next pulse from ``expected`` to ``new`` unless it changed meanwhile."""
        moved = await self._repo.advance(expected, new)
        self._forget()
        return moved

    async def ensure_next(self, now: datetime) -> PulseState:
        """Give a fresh or disabled-then-enabled pulse a next slot to wait for."""
        state = await self.get()
        if state.next_pulse_at is None and state.enabled:
            await self._repo.change(
                PulseChange(next_pulse_at=next_pulse(state.schedule(self.tz), now))
            )
            self._forget()
            state = await self.get()
        return state
