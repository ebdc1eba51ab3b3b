"""Telegram pairing: codes shown to people who write while the bot has no owner, the
owners approved with ``watchkeeper pair CODE``, and the codes the owner makes with
``watchkeeper pair --new`` (DESIGN.md, Trust tiers).

One collection, ``pairing``, protected from ``db_query`` writes:

- ``code:<user id>``: one pending code per Telegram user (``expires_at``; a TTL index
  removes it later, every read checks the time itself); writing again shows the same
  code and never extends it;
- ``busy:<user id>``: "too many pending requests" was said to this user (``expires_at``);
- ``invite:<sha256 of the code>``: a code made by the owner on the server, not counted
  against the ``MAX_PENDING`` strangers' codes, so strangers cannot keep the owner out;
  the first Telegram user who sends it becomes an owner. Only its hash is stored (the
  model may read this collection);
- ``owner:<user id>``: a paired owner, kept until removed by hand.

Names come in two kinds, never mixed up: a Telegram ``handle`` (the username field:
shown as ``@handle``) and a display ``name`` (anybody can call themselves "@realowner":
shown without ``@`` and parentheses, as ``realowner``). Either is followed by the
Telegram user id: ``Ann Lee (Telegram 4242)``.

No document holds what anybody wrote.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from runtime.clock import Clock
from storage import collections as c

Doc = dict[str, Any]
CODE_TTL = timedelta(minutes=10)
MAX_PENDING = 3
SHOW_EVERY = timedelta(minutes=1)
"""At most one pairing message per person per minute; more messages get silence."""
INVITE_DIGITS = 12
"""An owner's code is longer than a stranger's: anybody may send the bot guesses."""
_NOT_HANDLE = re.compile(r"[^A-Za-z0-9_]")
_NOT_IN_NAME = frozenset("@()")
"""Left out of a display name: it could pass for a handle or an id."""


@dataclass(frozen=True)
class PendingCode:
    code: str
    user_id: int
    chat_id: str
    name: str
    expires_at: datetime
    handle: str = ""

    def who(self) -> str:
        return who(self.user_id, self.name, self.handle)

    def command(self, cli: str = "watchkeeper") -> str:
        """The line the log and ``doctor`` show for this request; ``cli``: how this
        install's command line is run (``agent.cli.command.cli_command``)."""
        return f"run `{cli} pair {self.code}` to make {self.who()} the owner"


@dataclass(frozen=True)
class PairedOwner:
    user_id: int
    name: str
    chat_id: str
    paired_at: datetime
    handle: str = ""

    def who(self) -> str:
        return who(self.user_id, self.name, self.handle)

    def label(self) -> str:
        """``@handle``, else the display name, else empty."""
        return label(self.name, self.handle)


@dataclass(frozen=True)
class Invite:
    """A code the owner made on the server: whoever sends it to the bot first becomes
    an owner."""

    code: str
    expires_at: datetime


Outcome = Literal["new", "again", "quiet", "full"]


@dataclass(frozen=True)
class Offer:
    """What to tell a person who wrote while no owner is known."""

    outcome: Outcome
    """``new``: a code was made; ``again``: their pending code, shown again; ``quiet``:
    they were answered less than a minute ago; ``full``: too many requests pending."""
    pending: PendingCode | None = None


def who(user_id: int, name: str, handle: str = "") -> str:
    """``@ann (Telegram 4242)`` for a Telegram handle, ``Ann Lee (Telegram 4242)`` for a
    display name (without ``@`` or parentheses: a name "@realowner (Telegram 1)" cannot
    pass for the handle or another id), else ``Telegram 4242``. One line whatever the
    name holds."""
    shown = label(name, handle)
    return f"{shown} (Telegram {user_id})" if shown else f"Telegram {user_id}"


def label(name: str, handle: str = "") -> str:
    """``@handle``, else the display name (one line, without ``@`` and parentheses, at
    most 64 characters), else empty."""
    handle = _NOT_HANDLE.sub("", handle)[:32]  # what Telegram allows in a username
    if handle:
        return f"@{handle}"
    flat = " ".join(name.split())
    kept = "".join(ch for ch in flat if ch.isprintable() and ch not in _NOT_IN_NAME)
    return " ".join(kept.split())[:64]


def invite_code_in(text: str) -> str | None:
    """The owner's code in a message (``/start CODE`` or the bare code, spaces and
    dashes allowed), or None."""
    words = text.split()
    if words and words[0].split("@")[0].lower() == "/start":
        words = words[1:]
    code = "".join(words).replace("-", "")
    return code if len(code) == INVITE_DIGITS and code.isascii() and code.isdigit() else None


def _invite_key(code: str) -> str:
    return "invite:" + hashlib.sha256(code.encode()).hexdigest()


def _pending(doc: Doc) -> PendingCode:
    return PendingCode(
        doc["code"],
        int(doc["user_id"]),
        str(doc["chat_id"]),
        doc["name"],
        doc["expires_at"],
        str(doc.get("handle", "")),
    )


def _owner(doc: Doc) -> PairedOwner:
    return PairedOwner(
        int(doc["user_id"]),
        doc.get("name", ""),
        str(doc.get("chat_id", "")),
        doc["paired_at"],
        str(doc.get("handle", "")),
    )


class PairingStore:
    def __init__(self, db: AsyncDatabase[Doc], clock: Clock) -> None:
        self._db = db
        self._coll = db[c.PAIRING]
        self._clock = clock

    async def owners(self) -> list[PairedOwner]:
        """Paired owners, earliest first."""
        cursor = self._coll.find({"kind": "owner"}, sort=[("paired_at", 1), ("_id", 1)])
        return [_owner(doc) async for doc in cursor]

    async def pending(self) -> list[PendingCode]:
        """Codes not yet used nor expired, oldest first."""
        query = {"kind": "code", "expires_at": {"$gt": self._clock()}}
        cursor = self._coll.find(query, sort=[("created_at", 1), ("_id", 1)])
        return [_pending(doc) async for doc in cursor]

    async def offer(self, user_id: int, chat_id: str, name: str, *, handle: str = "") -> Offer:
        """The code for ``user_id``: their pending one (shown at most once a minute, and
        never extended) or a new one, unless ``MAX_PENDING`` other people are waiting
        already."""
        now = self._clock()
        key = f"code:{user_id}"
        doc = await self._coll.find_one({"_id": key, "expires_at": {"$gt": now}})
        if doc is not None:
            claimed = await self._coll.update_one(
                {"_id": key, "shown_at": {"$lte": now - SHOW_EVERY}}, {"$set": {"shown_at": now}}
            )
            return Offer("again" if claimed.modified_count else "quiet", _pending(doc))
        if len(await self.pending()) >= MAX_PENDING:
            return Offer("full" if await self._claim_busy(user_id, now) else "quiet")
        taken = {p.code for p in await self.pending()}
        code = _new_code(taken)
        await self._coll.delete_one({"_id": key})  # an expired code of theirs
        new = {
            "_id": key,
            "kind": "code",
            "code": code,
            "user_id": user_id,
            "chat_id": chat_id,
            "name": name,
            "handle": handle,
            "created_at": now,
            "shown_at": now,
            "expires_at": now + CODE_TTL,
        }
        try:
            await self._coll.insert_one(new)
        except DuplicateKeyError:
            return Offer("quiet")  # their other message made one just now
        if len(await self.pending()) > MAX_PENDING:  # others made one meanwhile
            await self._coll.delete_one({"_id": key, "code": code})
            return Offer("full" if await self._claim_busy(user_id, now) else "quiet")
        return Offer("new", _pending(new))

    async def _claim_busy(self, user_id: int, now: datetime) -> bool:
        """True the first time in ``SHOW_EVERY`` that this user hears "try later"."""
        key = f"busy:{user_id}"
        await self._coll.delete_one({"_id": key, "expires_at": {"$lte": now}})
        try:
            await self._coll.insert_one(
                {"_id": key, "kind": "busy", "expires_at": now + SHOW_EVERY}
            )
        except DuplicateKeyError:
            return False
        return True

    async def approve(self, code: str) -> PairedOwner | None:
        """Make the person shown ``code`` an owner and drop every other pending code;
        None when no pending code matches (wrong, expired or used)."""
        now = self._clock()
        doc = await self._coll.find_one(
            {"kind": "code", "code": code.strip(), "expires_at": {"$gt": now}}
        )
        if doc is None:
            return None
        pending = _pending(doc)
        owner = PairedOwner(pending.user_id, pending.name, pending.chat_id, now, pending.handle)
        await self._make_owner(owner)
        return owner

    async def invite(self) -> Invite:
        """A new owner's code, valid ``CODE_TTL``; it takes no stranger's slot."""
        now = self._clock()
        while True:
            code = f"{secrets.randbelow(10**INVITE_DIGITS):0{INVITE_DIGITS}d}"
            doc = {"_id": _invite_key(code), "kind": "invite", "created_at": now}
            try:
                await self._coll.insert_one(doc | {"expires_at": now + CODE_TTL})
            except DuplicateKeyError:  # the same 12 digits twice: draw again
                continue
            return Invite(code, now + CODE_TTL)

    async def invites_waiting(self) -> list[datetime]:
        """When each owner's code not yet used expires, soonest first (their digits are
        not stored, so they cannot be shown again)."""
        query = {"kind": "invite", "expires_at": {"$gt": self._clock()}}
        cursor = self._coll.find(query, sort=[("expires_at", 1), ("_id", 1)])
        return [doc["expires_at"] async for doc in cursor]

    async def claim(
        self, code: str, user_id: int, chat_id: str, name: str, *, handle: str = ""
    ) -> PairedOwner | None:
        """Make ``user_id`` an owner when ``code`` is an owner's code still valid; the
        code is used up at once (of two people sending it, one wins). None otherwise."""
        now = self._clock()
        used = await self._coll.find_one_and_delete(
            {"_id": _invite_key(code), "kind": "invite", "expires_at": {"$gt": now}}
        )
        if used is None:
            return None
        owner = PairedOwner(user_id, name, chat_id, now, handle)
        await self._make_owner(owner)
        return owner

    async def _make_owner(self, owner: PairedOwner) -> None:
        """Store ``owner``, drop the strangers' pending codes, and empty what the new
        owner wrote as a stranger."""
        now = owner.paired_at
        await self._coll.update_one(
            {"_id": f"owner:{owner.user_id}"},
            {
                "$set": {"name": owner.name, "handle": owner.handle, "chat_id": owner.chat_id},
                "$setOnInsert": {"kind": "owner", "user_id": owner.user_id, "paired_at": now},
            },
            upsert=True,
        )
        await self._coll.delete_many({"kind": {"$in": ["code", "busy"]}})
        # What they wrote as a stranger must not reach the model as the owner's words:
        # a row a crash left unhandled would be replayed under the new tier.
        await self._db[c.INBOX].update_many(
            {"channel": "telegram", "sender_id": str(owner.user_id), "received_at": {"$lte": now}},
            {
                "$set": {"text": "", "sender_name": "", "meta": {}, "stranger": True}
                | {"status": "done", "done_at": now},
                "$unset": {"reply_to": "", "media": ""},
            },
        )

    async def remove(self, user_id: int) -> PairedOwner | None:
        """Stop ``user_id`` being a paired owner; None when they were not one."""
        doc = await self._coll.find_one_and_delete({"kind": "owner", "user_id": user_id})
        return _owner(doc) if doc is not None else None


def _new_code(taken: set[str]) -> str:
    while True:
        code = f"{secrets.randbelow(1_000_000):06d}"
        if code not in taken:
            return code
