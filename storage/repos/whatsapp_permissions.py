"""WhatsApp permission records and the one way phone numbers are compared.

Numbers are matched exactly after normalising to E.164 (``+<digits>``), never by
substring: ``+4915123`` is not ``+49151234567``. A record may also name a group by
its JID (``<digits>-<digits>@g.us``), which is how a group is let in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from runtime.clock import utcnow
from storage import collections as c
from storage import retry

Doc = dict[str, Any]
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")
_GROUP = re.compile(r"^\d{5,25}(-\d{5,15})?@g\.us$")
_SEPARATORS = re.compile(r"[\s\-().\u00a0/]")


def normalise_phone(raw: str | None) -> str | None:
    """``+49 151 234-567`` -> ``+49151234567``; None when it is not an E.164 number.

    A leading ``00`` is read as ``+``; a number without a country prefix is refused
    rather than guessed.
    """
    if not raw:
        return None
    compact = _SEPARATORS.sub("", raw.strip())
    if compact.startswith("00"):
        compact = "+" + compact[2:]
    return compact if _E164.match(compact) else None


def normalise_address(raw: str | None) -> str | None:
    """An E.164 number or a group JID, normalised; None when it is neither."""
    if raw and "@" in raw:
        value = raw.strip().lower()
        return value if _GROUP.match(value) else None
    return normalise_phone(raw)


@dataclass(frozen=True)
class Permission:
    phone_number: str
    display_name: str = ""
    can_read: bool = False
    can_reply: bool = False

    def view(self) -> Doc:
        return {
            "phone_number": self.phone_number,
            "display_name": self.display_name,
            "can_read": self.can_read,
            "can_reply": self.can_reply,
        }


def _from_doc(doc: Doc) -> Permission:
    return Permission(
        phone_number=doc["phone_number"],
        display_name=doc.get("display_name") or "",
        can_read=bool(doc.get("can_read")),
        can_reply=bool(doc.get("can_reply")),
    )


class WhatsAppPermissions:
    """The ``whatsapp_permissions`` collection; callers pass normalised addresses."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.WHATSAPP_PERMISSIONS]

    async def get(self, address: str) -> Permission | None:
        doc = await self._coll.find_one({"phone_number": address})
        return _from_doc(doc) if doc else None

    async def all(self) -> list[Permission]:
        cursor = self._coll.find({}, sort=[("phone_number", 1)])
        return [_from_doc(d) async for d in cursor]

    async def readable(self) -> list[Permission]:
        cursor = self._coll.find({"can_read": True}, sort=[("phone_number", 1)])
        return [_from_doc(d) async for d in cursor]

    async def put(self, address: str, fields: Doc, *, create: bool) -> Permission | None:
        """Set ``fields`` on the record; creates it only when ``create`` (else None)."""
        now = utcnow()
        doc = await retry.retried(  # $set (upsert) on a unique key: safe to repeat
            lambda: self._coll.find_one_and_update(
                {"phone_number": address},
                {"$set": {**fields, "updated_at": now}, "$setOnInsert": {"created_at": now}},
                upsert=create,
                return_document=ReturnDocument.AFTER,
            ),
            "save a permission",
        )
        return _from_doc(doc) if doc else None

    async def remove(self, address: str) -> bool:
        # By a unique key: a repeat deletes nothing more (and may then say "not found").
        result = await retry.retried(
            lambda: self._coll.delete_one({"phone_number": address}), "remove a permission"
        )
        return result.deleted_count > 0
