"""The owner's own settings (who the owner is and where they are reached is
``agent.reach``'s).

Quiet hours, timezone, primary channel, and how long an unacknowledged
warning waits before it goes by SMS, in one ``settings`` document (``_id: "owner"``),
changed through ``manage_settings``. The environment's ``TIMEZONE`` is the default
until the owner sets one; quiet hours default to 22:00-07:00 until the owner sets them
(an empty list turns them off). Everything that needs the owner's clock reads
``OwnerSettings.tz`` (kept current in memory, refreshed from the database by ``load``),
so a change applies at once in this process and within a resync in another. The
scheduler's pulse reads them through its ``OwnerClock`` protocol, which
``OwnerSettings`` is.

A timezone change may be set for later (``effective_at``: "from tomorrow 10:00, New
York"): it is kept in the document as ``pending_zone`` until its moment, when
``apply_pending`` makes it (once, whichever process gets there first: the scheduler's
timer wakes it, ``agent.runs.zone_change``). Until the jobs have moved and the owner
was told, the change made stays as ``zone_moving``, so a process stopped in between
leaves it for the next start to finish (``finish_move``, then ``moved``). A timezone
given without a moment, or the current one, drops the pending change.

Quiet hours used to belong to the pulse (``settings`` ``_id: "pulse"``); ``load``
moves them here once, the first time it finds them there.

The document is read and written by its store (``storage.repos.owner_settings``); here
its values are checked (a zone that exists, a channel there is) and handed out typed.
"""

from __future__ import annotations

import logging
import time as monotonic
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pymongo.asynchronous.database import AsyncDatabase

from agent.reach import PRIMARY_CHOICES, Reach
from runtime.clock import Clock
from runtime.listeners import Listeners
from scheduler.cron.expression import CronError, validate_timezone
from scheduler.cron.job import JobError, parse_run_at
from scheduler.pulse.grid import (
    DEFAULT_QUIET,
    PulseConfigError,
    QuietHours,
    in_quiet_hours,
    parse_quiet_hours,
)
from storage.records import BadRecord
from storage.repos.owner_settings import OwnerSettingsStore, QuietWindow, StoredOwner, ZoneChange

log = logging.getLogger(__name__)
QUIET_SEARCH = timedelta(days=1, minutes=1)
MAX_QUIET_WINDOWS = 7
"""Quiet-hour windows a day may have (DESIGN.md, manage_settings): every held alert and
pulse checks each of them, minute by minute over a day, to find when quiet hours end."""
MAX_WARNING_SMS_AFTER_MINUTES = 10_080
"""``warning_sms_after_minutes`` at most a week: a longer wait is "never", which is 0."""
PENDING_ZONE_MAX = timedelta(days=366)
"""How far ahead a timezone change may be set (``effective_at``)."""
CACHE_SECONDS = 5.0
"""``fresh`` re-reads the document at most this often (another process's change)."""


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the bad value."""


@dataclass(frozen=True)
class OwnerPrefs:
    timezone: str
    quiet_hours: tuple[QuietHours, ...] = ()
    primary_channel: str | None = None
    warning_sms_after_minutes: int | None = None
    """Minutes an unacknowledged warning waits before its SMS (0: never by SMS); None
    until the owner sets it, when the alert routing's default applies."""
    zone_stored: bool = field(default=False, compare=False)
    """Whether the owner chose the zone (``manage_settings``); else it is ``TIMEZONE``'s."""
    pending_zone: ZoneChange | None = None
    """A timezone change set for later (``effective_at``), until it happens."""
    zone_moving: ZoneChange | None = None
    """A change made whose jobs may not have moved yet, or the owner not been told."""

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def zone_at(self, when: datetime) -> ZoneInfo:
        """The owner's zone at ``when``: the pending one from its moment on."""
        pending = self.pending_zone
        if pending is not None and when >= pending.at:
            return ZoneInfo(pending.timezone)
        return self.tz

    def quiet_dicts(self) -> list[dict[str, str]]:
        """The ``[{"start": "HH:MM", "end": "HH:MM"}]`` shape of the tool and storage."""
        return [window.as_dict() for window in self.quiet_hours]


Listener = Callable[[OwnerPrefs, OwnerPrefs], Awaitable[None]]
"""Called with (old, new) after ``update`` stored a change."""


def check_quiet_hours(items: Sequence[Mapping[str, object]]) -> tuple[QuietHours, ...]:
    if isinstance(items, list | tuple) and len(items) > MAX_QUIET_WINDOWS:
        raise SettingsError(
            f"quiet_hours has {len(items)} windows; at most {MAX_QUIET_WINDOWS} are allowed "
            "(join overlapping or adjacent ones)"
        )
    try:
        return tuple(parse_quiet_hours(items))
    except PulseConfigError as exc:
        raise SettingsError(str(exc)) from None


def check_timezone(name: str) -> str:
    try:
        return validate_timezone(name).key
    except CronError as exc:
        raise SettingsError(str(exc)) from None


def check_effective_at(text: str, tz: ZoneInfo, now: datetime) -> datetime:
    """``effective_at`` as an instant: ISO 8601, a wall time in ``tz`` (the owner's
    current zone) unless it has an offset; after now and at most a year ahead."""
    try:
        at = parse_run_at(text, tz, "effective_at")
    except JobError as exc:
        raise SettingsError(str(exc)) from None
    local = now.astimezone(tz).isoformat(timespec="minutes")
    if at <= now:
        raise SettingsError(
            f"effective_at {text!r} is not in the future (it is now {local} in {tz.key}); "
            "for a change now, leave effective_at out"
        )
    if at - now > PENDING_ZONE_MAX:
        raise SettingsError(f"effective_at {text!r} is more than a year ahead (now {local})")
    return at


def check_channel(name: str) -> str:
    value = name.strip().lower() if isinstance(name, str) else name
    if value not in PRIMARY_CHOICES:
        choices = ", ".join(PRIMARY_CHOICES)
        raise SettingsError(f"primary_channel {name!r} is not a channel; use one of {choices}")
    return str(value)


def check_warning_sms_after(minutes: object) -> int:
    if isinstance(minutes, bool) or not isinstance(minutes, int):
        raise SettingsError(f"warning_sms_after_minutes {minutes!r} is not a whole number")
    if not 0 <= minutes <= MAX_WARNING_SMS_AFTER_MINUTES:
        raise SettingsError(
            f"warning_sms_after_minutes {minutes} is out of range: 0 (warnings never go by "
            f"SMS) to {MAX_WARNING_SMS_AFTER_MINUTES} (a week)"
        )
    return minutes


def check_reachable(name: str, reach: Reach) -> str:
    """``name`` as a ``primary_channel`` the owner can be reached on; else
    ``SettingsError`` saying why and naming the configured ones."""
    channel = check_channel(name)
    why = reach.unreachable(channel)
    if why is None:
        return channel
    choices = reach.primary_choices()
    rest = (
        f"configured: {', '.join(choices)}"
        if choices
        else "no chat channel is configured, so messages go to the terminal and the log"
    )
    raise SettingsError(f"primary_channel {channel!r} cannot be used: {why}; {rest}")


def quiet_end(windows: Sequence[QuietHours], now: datetime, tz: ZoneInfo) -> datetime | None:
    """When the quiet hours that hold ``now`` end, or None when ``now`` is not quiet."""
    if not windows or not in_quiet_hours(windows, now, tz):
        return None
    step = now.replace(second=0, microsecond=0)
    limit = now + QUIET_SEARCH
    while step < limit:  # minute steps: windows may chain and cross midnight or DST
        step += timedelta(minutes=1)
        if not in_quiet_hours(windows, step, tz):
            return step
    return None  # quiet all day: configured so on purpose; do not hold forever


def _zone_change(change: ZoneChange | None, name: str) -> ZoneChange | None:
    """A stored timezone change with its zones checked; one that cannot be used is
    logged and ignored."""
    if change is None:
        return None
    try:
        was = check_timezone(change.was) if change.was else None
        return replace(change, timezone=check_timezone(change.timezone), was=was)
    except SettingsError as exc:
        log.warning("stored %s ignored: %s", name, exc)
        return None


def _stored(windows: Sequence[QuietHours]) -> tuple[QuietWindow, ...]:
    """Checked windows as their store writes them."""
    return tuple(QuietWindow(**window.as_dict()) for window in windows)


class OwnerSettings:
    """The owner's settings: read in ``load`` (into ``OwnerPrefs``, checked) and
    written only from checked values, so what it hands out is always valid."""

    def __init__(
        self, db: AsyncDatabase[dict[str, Any]], clock: Clock, default_timezone: str
    ) -> None:
        self._store = OwnerSettingsStore(db)
        self._clock = clock
        self.default_timezone = default_timezone
        self.current = OwnerPrefs(timezone=default_timezone, quiet_hours=DEFAULT_QUIET)
        self.listeners: Listeners[Listener] = Listeners()
        """Told of every change ``update`` stores; fixed once the app is assembled."""
        self._loaded_at: float | None = None
        self._migrated = False
        self._told_truncated = False

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with (old, new) after every stored change."""
        self.listeners.append(listener)

    def _stored_quiet_hours(
        self, items: Sequence[QuietWindow], where: str
    ) -> tuple[QuietHours, ...]:
        """Stored windows, checked. Windows stored before there was a limit: the first
        ``MAX_QUIET_WINDOWS`` are used (logged once), so no alert or pulse pays for a
        thousand of them."""
        if len(items) > MAX_QUIET_WINDOWS:
            if not self._told_truncated:
                self._told_truncated = True
                log.warning(
                    "%s has %d quiet-hour windows; only the first %d are used (the limit); "
                    "set them again with manage_settings",
                    where,
                    len(items),
                    MAX_QUIET_WINDOWS,
                )
            items = items[:MAX_QUIET_WINDOWS]
        return check_quiet_hours([window.as_dict() for window in items])

    @property
    def tz(self) -> ZoneInfo:
        """The owner's timezone now (sync: for formatting and prompts)."""
        return self.current.tz

    def _parse(self, stored: StoredOwner) -> OwnerPrefs:
        """The stored settings over the defaults; a bad stored value keeps its default."""
        prefs = OwnerPrefs(timezone=self.default_timezone, quiet_hours=DEFAULT_QUIET)
        if stored.quiet_hours is not None:
            try:
                windows = self._stored_quiet_hours(stored.quiet_hours, "the owner's settings")
                prefs = replace(prefs, quiet_hours=windows)
            except SettingsError as exc:
                log.warning("stored quiet_hours ignored: %s", exc)
        if stored.timezone:
            try:
                zone = check_timezone(stored.timezone)
                prefs = replace(prefs, timezone=zone, zone_stored=True)
            except SettingsError as exc:
                log.warning("stored timezone ignored: %s", exc)
        prefs = replace(
            prefs,
            pending_zone=_zone_change(stored.pending_zone, "pending_zone"),
            zone_moving=_zone_change(stored.zone_moving, "zone_moving"),
        )
        if stored.primary_channel:
            try:
                prefs = replace(prefs, primary_channel=check_channel(stored.primary_channel))
            except SettingsError as exc:
                log.warning("stored primary_channel ignored: %s", exc)
        if stored.warning_sms_after_minutes is not None:
            try:
                minutes = check_warning_sms_after(stored.warning_sms_after_minutes)
                prefs = replace(prefs, warning_sms_after_minutes=minutes)
            except SettingsError as exc:
                log.warning("stored warning_sms_after_minutes ignored: %s", exc)
        return prefs

    async def _migrate(self) -> None:
        """Quiet hours the pulse kept move here once (if none are set here yet)."""
        try:
            found = await self._store.pulse_quiet_hours()
            if found is None:
                return
            windows = self._stored_quiet_hours(found, "the pulse's settings")
        except (BadRecord, SettingsError) as exc:
            log.warning("the pulse's quiet_hours were not moved (%s); the default applies", exc)
        else:
            await self._store.adopt_quiet_hours(_stored(windows))
            log.info("quiet hours moved from the pulse to the owner's settings")
        await self._store.drop_pulse_quiet_hours()

    async def load(self) -> OwnerPrefs:
        """Re-read the stored settings into ``current`` (start-up, resync)."""
        if not self._migrated:
            await self._migrate()
            self._migrated = True
        self.current = self._parse(await self._store.read())
        self._loaded_at = monotonic.monotonic()
        return self.current

    async def fresh(self) -> OwnerPrefs:
        """``current``, re-read when older than ``CACHE_SECONDS`` (cheap; for every alert)."""
        loaded = self._loaded_at
        if loaded is None or monotonic.monotonic() - loaded >= CACHE_SECONDS:
            try:
                return await self.load()
            except Exception:
                log.exception("owner settings could not be read; using the last known")
        return self.current

    async def update(
        self,
        *,
        quiet_hours: Sequence[Mapping[str, object]] | None = None,
        timezone: str | None = None,
        primary_channel: str | None = None,
        warning_sms_after_minutes: int | None = None,
        effective_at: str | None = None,
        origin: tuple[str, str] | None = None,
    ) -> OwnerPrefs:
        """Validate every given value first (nothing is stored when one is bad), store
        them with ``$set``, then tell the listeners (pulse re-plan, cron jobs' timezone).
        ``effective_at`` keeps ``timezone`` as the pending change instead (``origin``:
        the chat told when it happens); a timezone now, or the current one, drops it."""
        if effective_at is not None and timezone is None:
            raise SettingsError("effective_at says when a timezone change happens: give timezone")
        windows = None if quiet_hours is None else _stored(check_quiet_hours(quiet_hours))
        zone = check_timezone(timezone) if timezone is not None else None
        channel = None if primary_channel is None else check_channel(primary_channel)
        minutes = (
            None
            if warning_sms_after_minutes is None
            else check_warning_sms_after(warning_sms_after_minutes)
        )
        if windows is None and zone is None and channel is None and minutes is None:
            raise SettingsError(
                "nothing to update: give quiet_hours, timezone, primary_channel or "
                "warning_sms_after_minutes"
            )
        old = await self.load()
        now = self._clock()
        pending = None
        if zone is not None:
            at = None if effective_at is None else check_effective_at(effective_at, old.tz, now)
            if at is not None and zone != old.timezone:
                told, chat = origin or (None, None)
                pending = ZoneChange(zone, at, told, chat)
                zone = None  # kept for its moment, not made now
        await self._store.change(
            updated_at=now,
            quiet_hours=windows,
            timezone=zone,  # now: drops a pending change
            primary_channel=channel,
            warning_sms_after_minutes=minutes,
            pending_zone=pending,
        )
        new = await self.load()
        await self._tell(old, new)
        return new

    async def apply_pending(self, now: datetime, message: str) -> bool:
        """Make the pending timezone change when its moment has come, keeping it as
        ``zone_moving`` with ``message`` (what the owner is to be told) until
        ``moved``. True when this call made it; False when none was due, or another
        process made it first (a compare-and-set on the stored change)."""
        old = await self.load()
        pending = old.pending_zone
        if pending is None or pending.at > now:
            return False
        made = replace(pending, was=old.timezone, message=message)
        changed = await self._store.make_change(made, now)
        await self.load()
        if not changed:
            return False
        log.info("timezone %s -> %s, as set for %s", old.timezone, pending.timezone, pending.at)
        return True

    async def finish_move(self) -> ZoneChange | None:
        """A change made but not finished (this process just made it, or one stopped
        before it was done): the listeners are told (old, new) again, which moves the
        jobs still on the old zone; the change returned, to be told to the owner and
        then marked ``moved``. None when nothing is unfinished."""
        new = await self.load()
        moving = new.zone_moving
        if moving is None or moving.was is None:
            return None
        await self._tell(replace(new, timezone=moving.was), new)
        return moving

    async def moved(self, change: ZoneChange) -> None:
        """The change's jobs moved and the owner was told: nothing left to finish."""
        await self._store.moved(change.at)
        await self.load()

    async def _tell(self, old: OwnerPrefs, new: OwnerPrefs) -> None:
        for listener in self.listeners:
            try:
                await listener(old, new)
            except Exception:
                log.exception("owner settings listener failed")

    def quiet_end(self, now: datetime) -> datetime | None:
        """``quiet_until`` from the settings in memory (sync)."""
        return quiet_end(self.current.quiet_hours, now, self.tz)

    async def quiet_until(self, now: datetime) -> datetime | None:
        """When the current quiet hours end, or None when it is not quiet at ``now``."""
        await self.fresh()
        return self.quiet_end(now)
