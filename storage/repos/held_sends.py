"""What the agent was not allowed to do alone, held until the owner confirms in chat
("send 4711", "approve 4711") or declines ("cancel 4711"): messages to someone the owner
has not approved, and the acting tool calls of a run that read outside text (a tool
name and its arguments, with why it was held and the run it belongs to).

What one exchange holds (one chat message answered, one cron or pulse run) forms one
group under one code, so a fan-out to twenty new numbers is one question to the owner.
A group lives in ``settings`` under ``held_send:<code>``, with the exchange's id:
readable by the model (its own words), writable only here. Guarantees:

1. A send or a call is in its exchange's group once: the same one held again (a
   replayed exchange) is not added twice (``$addToSet``).
2. A group has a ``key`` no other group ever has (codes are reused, keys are not):
   the outbox keys of its question and of its sends derive from it, so a confirmation
   replayed after a crash half-way, or sent twice, queues each send once.
3. An approved group stays approved until ``release`` (its sends queued, its calls
   made) or ``reopen`` (a call was interrupted): it can no longer be declined, and a
   second "send" finishes what a first one left.
4. A declined or expired group is never sent or made. A group expires a day after it
   was held or last approved (``expires_at``): a TTL index deletes it, and a code
   taken by an expired group is freed when a new group draws it, so stale groups
   never use up the 9,000 codes.
5. A held call is made once or is said not to have finished: ``start`` marks it
   (by the approval making it, under a lease renewed while it runs) before it is made,
   ``finish`` records its outcome after. Only a recorded outcome counts as done; a
   call started and never finished (its process died) is interrupted: it is never
   made again on the same approval, and ``reopen`` asks the owner anew.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage import retry
from storage.ejson import aware

log = logging.getLogger(__name__)
PREFIX = "held_send:"
KEEP = timedelta(days=1)
LEASE = timedelta(minutes=2)
"""How long a started call counts as being made without news from the approval making
it (renewed while it runs): past it, a call with no recorded outcome was interrupted."""
CODE_TRIES = 20
RunKind = Literal["chat", "cron", "pulse"]
RUN_KINDS: tuple[RunKind, ...] = ("chat", "cron", "pulse")
Doc = dict[str, Any]


@dataclass(frozen=True)
class HeldSend:
    """One message waiting for the owner."""

    channel: str
    chat_id: str
    text: str


@dataclass(frozen=True)
class HeldAction:
    """One tool call waiting for the owner: what to call, with what, and why it waits."""

    tool: str
    arguments: str
    """The call's arguments as JSON text (keys sorted): stored as text, so an update's
    ``$set`` is data, never an operator, and the same call compares equal."""
    why: str

    @classmethod
    def of(cls, tool: str, arguments: Mapping[str, Any], why: str) -> HeldAction:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
        return cls(tool, text, why)

    @property
    def args(self) -> dict[str, Any]:
        loaded = json.loads(self.arguments)
        return loaded if isinstance(loaded, dict) else {}


@dataclass(frozen=True)
class HeldRun:
    """The run a held call was made in: it is made again as that run (``run`` of a
    group, as stored)."""

    kind: RunKind | None = None
    channel: str | None = None
    chat_id: str | None = None
    sender: str | None = None
    conversation_key: str | None = None
    job_id: str | None = None
    job_name: str | None = None

    @property
    def scheduled(self) -> bool:
        """A cron job's run or a pulse: nobody was watching when it held its calls."""
        return self.kind in ("cron", "pulse")


class HeldRecordError(ValueError):
    """A stored group that cannot be read; the message names the field."""


@dataclass(frozen=True)
class HeldGroup:
    """What one exchange held, approved or declined together by ``code``."""

    code: str
    key: str
    """This group's own id, never another's (guarantee 2)."""
    sends: tuple[HeldSend, ...]
    actions: tuple[HeldAction, ...] = ()
    run: HeldRun = field(default_factory=HeldRun)
    """The run the held calls were made in: they are made as it."""
    untrusted: tuple[str, ...] = ()
    """The outside text that run had read: why its calls were held."""
    started: Mapping[int, Started] = field(default_factory=dict)
    """Calls of ``actions`` being made, or cut off while made (guarantee 5), by index."""
    finished: Mapping[int, str] = field(default_factory=dict)
    """Calls made, by index: what the owner was told of each (its recorded outcome)."""
    interrupted: frozenset[int] = frozenset()
    """Calls once cut off while made, and offered to the owner again."""
    spent: frozenset[str] = frozenset()
    """Approvals that found a call interrupted: handled again, they make nothing."""


@dataclass(frozen=True)
class Started:
    """A held call being made: by which approval, and until when that counts as alive."""

    by: str
    until: datetime


_MARKS = ("started", "claimed", "finished")
"""A call with any of these was made, or is being made, or was cut off while made."""


def _group(doc: Doc) -> HeldGroup:
    """The group ``doc`` holds; ``HeldRecordError`` naming the field when it holds none."""
    code = str(doc.get("_id", "")).removeprefix(PREFIX)
    try:
        return _read_group(code, doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise HeldRecordError(f"held group {code!r}: {exc!r}") from None


def _read_group(code: str, doc: Doc) -> HeldGroup:
    key = str(doc.get("key") or f"{code}:{doc.get('held_at')}")
    if "sends" not in doc and "channel" in doc:  # held one by one before groups existed
        return HeldGroup(code, key, (_send(doc),))
    sends = tuple(_send(s) for s in doc.get("sends") or ())
    actions = tuple(_action(a) for a in doc.get("actions") or ())
    untrusted = tuple(str(u) for u in doc.get("untrusted") or ())
    started = {
        int(i): Started(str(mark.get("by", "")), aware(mark.get("until")) or _EPOCH)
        for i, mark in (doc.get("started") or {}).items()
        if isinstance(mark, dict)
    }
    # Claimed by a version that recorded no outcome: its maker is long gone.
    for i in doc.get("claimed") or {}:
        started.setdefault(int(i), Started("", _EPOCH))
    finished = {
        int(i): str(mark.get("line", ""))
        for i, mark in (doc.get("finished") or {}).items()
        if isinstance(mark, dict)
    }
    interrupted = frozenset(int(i) for i in (doc.get("interrupted") or {}))
    spent = frozenset(str(by) for by in doc.get("spent") or ())
    return HeldGroup(
        code,
        key,
        sends,
        actions,
        _run(doc.get("run")),
        untrusted,
        started,
        finished,
        interrupted,
        spent,
    )


def _action(item: Mapping[str, Any]) -> HeldAction:
    arguments = str(item["arguments"])
    if not isinstance(json.loads(arguments), dict):
        raise ValueError(f"the arguments of {item['tool']!r} are not a JSON object")
    return HeldAction(str(item["tool"]), arguments, str(item.get("why", "")))


def _send(item: Mapping[str, Any]) -> HeldSend:
    return HeldSend(str(item["channel"]), str(item["chat_id"]), str(item["text"]))


def _run(stored: Any) -> HeldRun:
    """A group's ``run`` as stored (a document of text fields; absent for sends)."""
    if not stored:
        return HeldRun()
    if not isinstance(stored, dict):
        raise TypeError(f"run is {stored!r}, not a document")

    def text(name: str) -> str | None:
        value = stored.get(name)
        return None if value is None else str(value)

    kind = stored.get("kind")
    return HeldRun(
        kind=cast(RunKind, kind) if kind in RUN_KINDS else None,
        channel=text("channel"),
        chat_id=text("chat_id"),
        sender=text("sender"),
        conversation_key=text("conversation_key"),
        job_id=text("job_id"),
        job_name=text("job_name"),
    )


def _read(doc: Doc | None) -> HeldGroup | None:
    """``doc`` as a group; None when there is none, or (logged) when it cannot be read:
    a damaged group is never sent or made, and never stops the chat it is asked in."""
    if doc is None:
        return None
    try:
        return _group(doc)
    except HeldRecordError as exc:
        log.error("skipped a damaged held group: %s", exc)
        return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _live(now: datetime) -> Doc:
    """Not expired. A group stored before ``expires_at`` existed counts as expired (a
    day's questions at the upgrade at most); no ``$or``: it would cost the ``_id``
    index (SecantusDB then scans every settings document)."""
    return {"expires_at": {"$gt": now}}


def _stale(now: datetime) -> Doc:
    """Expired: the opposite of ``_live`` (no ``expires_at`` included)."""
    return {"expires_at": {"$not": {"$gt": now}}}


def _open(now: datetime) -> Doc:
    """Still waiting for the owner: neither approved nor expired."""
    return {"approved": {"$exists": False}, **_live(now)}


class HeldSends:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.SETTINGS]

    async def hold(
        self,
        item: HeldSend | HeldAction,
        now: datetime,
        *,
        exchange: str | None,
        run: HeldRun | None = None,
        untrusted: Iterable[str] = (),
    ) -> HeldGroup:
        """Add ``item`` to the open group of ``exchange`` (a new group when it has none,
        or when ``exchange`` is None: an exchange without a stable id). A held call
        names the ``run`` it is to be made as and the ``untrusted`` text it followed."""
        array = "sends" if isinstance(item, HeldSend) else "actions"
        sources = list(dict.fromkeys(untrusted))
        if exchange is not None:
            update: Doc = {"$addToSet": {array: asdict(item), "untrusted": {"$each": sources}}}
            if run is not None:
                update["$set"] = {"run": asdict(run)}
            doc = await self._coll.find_one_and_update(
                {"_id": {"$regex": f"^{PREFIX}"}, "exchange": exchange, **_open(now)},
                update,
                return_document=ReturnDocument.AFTER,
            )
            if (group := _read(doc)) is not None:
                return group
        for _ in range(CODE_TRIES):
            code = f"{secrets.randbelow(9000) + 1000}"
            doc = {
                "_id": PREFIX + code,
                "key": secrets.token_hex(8),
                "exchange": exchange,
                "sends": [],
                "actions": [],
                array: [asdict(item)],
                "run": asdict(run) if run is not None else {},
                "untrusted": sources,
                "held_at": now,
                "expires_at": now + KEEP,
            }
            if await self._insert(doc, now):
                return _group(doc)
        raise RuntimeError("could not allocate a confirmation code")

    async def _insert(self, doc: Doc, now: datetime) -> bool:
        """Store a new group under its code; False when a live group has the code. An
        expired group holding it (the TTL monitor has not come by yet) gives it up."""
        for _ in range(2):
            try:
                await self._coll.insert_one(doc)
            except DuplicateKeyError:
                gone = await self._coll.delete_one({"_id": doc["_id"], **_stale(now)})
                if gone.deleted_count == 0:
                    return False
                continue
            return True
        return False

    async def waiting(self, code: str, now: datetime) -> HeldGroup | None:
        """The open group of ``code``, as the owner is to be asked about it."""
        doc = await self._coll.find_one({"_id": PREFIX + code, **_open(now)})
        return _read(doc)

    async def approve(self, code: str, now: datetime, by: str = "") -> HeldGroup | None:
        """The group of ``code``, now approved by ``by`` (or approved before and not yet
        released), with a day more to finish; None when unknown, expired or declined,
        or when ``by`` already found one of its calls interrupted (``reopen``)."""
        doc = await self._coll.find_one_and_update(
            {"_id": PREFIX + code, "spent": {"$ne": by}, **_live(now)},
            {"$set": {"approved": True, "expires_at": now + KEEP}},
            return_document=ReturnDocument.AFTER,
        )
        return _read(doc)

    async def start(self, group: HeldGroup, index: int, by: str, now: datetime) -> bool:
        """Mark the held call ``index`` of an approved group as being made now by the
        approval ``by``: True for the one approval that may make it, False when it was
        started or finished before (guarantee 5). Recorded before the call is made."""
        free = {f"{field}.{index}": {"$exists": False} for field in _MARKS}
        done = await self._coll.update_one(
            {"_id": PREFIX + group.code, "approved": True, **free},
            {"$set": {f"started.{index}": {"by": by, "at": now, "until": now + LEASE}}},
        )
        return done.modified_count == 1

    async def renew(self, group: HeldGroup, index: int, by: str, now: datetime) -> None:
        """Say that the approval ``by`` is still making call ``index`` (its lease)."""
        await retry.retried(  # $set by key: safe to repeat
            lambda: self._coll.update_one(
                {"_id": PREFIX + group.code, f"started.{index}.by": by},
                {"$set": {f"started.{index}.until": now + LEASE}},
            ),
            "renew a held call's lease",
        )

    async def finish(self, group: HeldGroup, index: int, line: str, now: datetime) -> None:
        """Record the outcome of call ``index`` (what the owner is told of it): from
        now on it counts as made."""
        await retry.retried(  # $set by key: safe to repeat
            lambda: self._coll.update_one(
                {"_id": PREFIX + group.code},
                {"$set": {f"finished.{index}": {"line": line, "at": now}}},
            ),
            "record a held call's outcome",
        )

    async def reopen(
        self, group: HeldGroup, indexes: Iterable[int], by: str, now: datetime
    ) -> None:
        """Put an approved group whose calls ``indexes`` were interrupted back before
        the owner: no longer approved, those calls not started, a day to answer. The
        approval ``by`` that found them so is spent: handled again after a crash, it
        does not approve them anew (only a new word from the owner does)."""
        marks = list(indexes)
        unset = {"approved": ""} | {f"{f}.{i}": "" for i in marks for f in ("started", "claimed")}
        await retry.retried(  # a compare-and-set the first try makes false, then $set
            lambda: self._coll.update_one(
                {"_id": PREFIX + group.code},
                {
                    "$unset": unset,
                    "$set": {"expires_at": now + KEEP} | {f"interrupted.{i}": now for i in marks},
                    "$addToSet": {"spent": by},
                },
            ),
            "reopen an interrupted held group",
        )

    async def spent_by(self, code: str, by: str, now: datetime) -> HeldGroup | None:
        """The live group of ``code`` when the approval ``by`` found a call of it
        interrupted (its answer, given again)."""
        doc = await self._coll.find_one({"_id": PREFIX + code, "spent": by, **_live(now)})
        return _read(doc)

    async def release(self, group: HeldGroup) -> None:
        """Forget an approved group once its sends are queued and its calls made."""
        await self._coll.delete_one({"_id": PREFIX + group.code, "approved": True})

    async def decline(self, code: str, now: datetime) -> HeldGroup | None:
        """Drop the open group of ``code``; what it held, or None when there was none."""
        doc = await self._coll.find_one_and_delete({"_id": PREFIX + code, **_open(now)})
        return _read(doc)
