"""The owner's ``settings`` document (``_id: "owner"``) as typed values, and its store.

``OwnerSettingsStore`` holds every query and write of the owner's settings (and the
quiet hours the pulse's document used to keep), in and out as ``StoredOwner``,
``QuietWindow`` and ``ZoneChange``. It reads what is stored as it is stored: which
zones, channels and hours are valid is the owner's settings' (``agent.owner``), which
check what it hands out. A field stored with the wrong shape is logged and read as
unset, so one bad value never hides the others.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage import retry
from storage.records import BadRecord, Doc, moment, text

log = logging.getLogger(__name__)
OWNER_ID = "owner"
PULSE_ID = "pulse"
"""The pulse's settings document, where quiet hours used to be kept."""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class QuietWindow:
    """A quiet-hour window as stored: its start and end, ``"HH:MM"`` as written."""

    start: str
    end: str

    def as_dict(self) -> dict[str, str]:
        """The ``{"start": "HH:MM", "end": "HH:MM"}`` shape of storage and the tool."""
        return {"start": self.start, "end": self.end}


@dataclass(frozen=True, slots=True)
class ZoneChange:
    """A timezone change set for later: the zone, from when, and the chat it was set
    from (told when it happens; None: the owner's main chat)."""

    timezone: str
    at: datetime
    channel: str | None = None
    chat_id: str | None = None
    was: str | None = None
    """Once made: the zone it replaced."""
    message: str = ""
    """Once made: what the owner is told (written as it was made, so any process that
    finishes the move tells the same)."""

    def as_doc(self) -> Doc:
        return {
            "timezone": self.timezone,
            "at": self.at,
            "channel": self.channel,
            "chat_id": self.chat_id,
            "was": self.was,
            "message": self.message,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> ZoneChange:
        """The stored change; ``BadRecord`` when it cannot be one."""
        at = moment(doc, "at")
        if at is None:
            raise BadRecord("at is missing")
        channel, chat, was = doc.get("channel"), doc.get("chat_id"), doc.get("was")
        return cls(
            timezone=str(doc.get("timezone")),
            at=at,
            channel=str(channel) if channel else None,
            chat_id=str(chat) if chat else None,
            was=str(was) if was else None,
            message=str(doc.get("message") or ""),
        )


@dataclass(frozen=True, slots=True)
class StoredOwner:
    """The owner's settings as stored; None: not set (or stored damaged)."""

    quiet_hours: tuple[QuietWindow, ...] | None = None
    """Set: the windows (none: quiet hours off)."""
    timezone: str | None = None
    primary_channel: str | None = None
    warning_sms_after_minutes: int | None = None
    pending_zone: ZoneChange | None = None
    zone_moving: ZoneChange | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> StoredOwner:
        """The settings ``doc`` holds; a field that cannot be read is logged and unset."""
        doc = doc or {}
        return cls(
            quiet_hours=_field(doc, "quiet_hours", _windows) if "quiet_hours" in doc else None,
            timezone=_field(doc, "timezone", _filled_text),
            primary_channel=_field(doc, "primary_channel", _filled_text),
            warning_sms_after_minutes=_field(doc, "warning_sms_after_minutes", _whole),
            pending_zone=_field(doc, "pending_zone", _change),
            zone_moving=_field(doc, "zone_moving", _change),
        )


def _field(doc: Mapping[str, Any], name: str, read: Callable[[Any, str], T | None]) -> T | None:
    try:
        return read(doc.get(name), name)
    except BadRecord as exc:
        log.warning("stored %s ignored: %s", name, exc)
        return None


def _windows(value: Any, name: str) -> tuple[QuietWindow, ...]:
    """Stored quiet hours; null or empty: none (off)."""
    items = value or []
    if not isinstance(items, list | tuple):
        raise BadRecord(f'{name} must be a list of {{"start": "HH:MM", "end": "HH:MM"}}')
    windows = []
    for index, item in enumerate(items):
        where = f"{name}[{index}]"
        if not isinstance(item, Mapping) or set(item) != {"start", "end"}:
            raise BadRecord(f'{where} must be an object {{"start": "HH:MM", "end": "HH:MM"}}')
        windows.append(QuietWindow(text(item, "start"), text(item, "end")))
    return tuple(windows)


def _filled_text(value: Any, name: str) -> str | None:
    """Text, or None when empty or absent."""
    if not value:
        return None
    if not isinstance(value, str):
        raise BadRecord(f"{name} is {value!r}, not text")
    return value


def _whole(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{name} is {value!r}, not a whole number")
    return value


def _change(value: Any, name: str) -> ZoneChange | None:
    """A stored change; anything but a document is none."""
    return ZoneChange.from_doc(value) if isinstance(value, Mapping) else None


class OwnerSettingsStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]

    async def read(self) -> StoredOwner:
        """The owner's settings as stored (all unset when there is no document)."""
        return StoredOwner.from_doc(await self._coll.find_one({"_id": OWNER_ID}))

    async def change(
        self,
        *,
        updated_at: datetime,
        quiet_hours: Sequence[QuietWindow] | None = None,
        timezone: str | None = None,
        primary_channel: str | None = None,
        warning_sms_after_minutes: int | None = None,
        pending_zone: ZoneChange | None = None,
    ) -> None:
        """Store the given values (None: unchanged); a ``timezone`` drops the pending
        change. A ``$set`` by ``_id`` (an upsert): retried once."""
        fields: Doc = {}
        if quiet_hours is not None:
            fields["quiet_hours"] = [w.as_dict() for w in quiet_hours]
        if primary_channel is not None:
            fields["primary_channel"] = primary_channel
        if warning_sms_after_minutes is not None:
            fields["warning_sms_after_minutes"] = warning_sms_after_minutes
        if timezone is not None:
            fields["timezone"] = timezone
        if pending_zone is not None:
            fields["pending_zone"] = pending_zone.as_doc()
        fields["updated_at"] = updated_at
        change: Doc = {"$set": fields}
        if timezone is not None:
            change["$unset"] = {"pending_zone": ""}
        await retry.retried(  # a $set by _id: repeating it changes nothing more
            lambda: self._coll.update_one({"_id": OWNER_ID}, change, upsert=True),
            "update the owner's settings",
        )

    async def make_change(self, made: ZoneChange, now: datetime) -> bool:
        """Make the pending change (stored for ``made.at``): its zone from now on, kept
        as ``zone_moving`` (``made``) until ``moved``. False when the stored pending
        change is another (or gone: another process made it first)."""
        result = await retry.retried(  # a repeat finds the change gone and does nothing
            lambda: self._coll.update_one(
                {"_id": OWNER_ID, "pending_zone.at": made.at},
                {
                    "$set": {
                        "timezone": made.timezone,
                        "zone_moving": made.as_doc(),
                        "updated_at": now,
                    },
                    "$unset": {"pending_zone": ""},
                },
            ),
            "make the pending timezone change",
        )
        return result.modified_count == 1

    async def moved(self, at: datetime) -> None:
        """The change made for ``at`` is finished: no longer ``zone_moving``."""
        await retry.retried(
            lambda: self._coll.update_one(
                {"_id": OWNER_ID, "zone_moving.at": at}, {"$unset": {"zone_moving": ""}}
            ),
            "finish the timezone change",
        )

    async def pulse_quiet_hours(self) -> tuple[QuietWindow, ...] | None:
        """The quiet hours the pulse's document still keeps (None: none there);
        ``BadRecord`` when they are stored damaged."""
        pulse = await self._coll.find_one({"_id": PULSE_ID}, projection={"quiet_hours": 1})
        if pulse is None or "quiet_hours" not in pulse:
            return None
        return _windows(pulse.get("quiet_hours"), "quiet_hours")

    async def adopt_quiet_hours(self, windows: Sequence[QuietWindow]) -> None:
        """Store ``windows`` as the owner's quiet hours unless the owner has some."""
        # DuplicateKeyError: the owner document has quiet hours already; those win.
        with contextlib.suppress(DuplicateKeyError):
            await retry.retried(  # a repeat finds quiet_hours set and changes nothing
                lambda: self._coll.update_one(
                    {"_id": OWNER_ID, "quiet_hours": {"$exists": False}},
                    {"$set": {"quiet_hours": [w.as_dict() for w in windows]}},
                    upsert=True,
                ),
                "move quiet hours to the owner's settings",
            )

    async def drop_pulse_quiet_hours(self) -> None:
        """The pulse's document keeps no quiet hours any more."""
        await retry.retried(
            lambda: self._coll.update_one({"_id": PULSE_ID}, {"$unset": {"quiet_hours": ""}}),
            "drop the pulse's quiet hours",
        )
