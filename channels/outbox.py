"""The outbox: every reply is stored with an idempotency key, then sent with retries.

A reply is claimed atomically (``pending`` -> ``sending``) before it is sent, so
the fast path (send right after enqueue) and the retry loop never send it twice.
One that finally fails stays in the collection as ``failed`` with its error and
is reported; nothing is dropped silently. Under load, replies stored and sends
recorded meanwhile share one command each (``storage.group_commit``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.text import clean_text, clean_value
from channels.types import Button, Channel, OutboundMessage, SendError
from storage import collections as c
from storage import retry
from storage.group_commit import GroupCommit, insert_each, set_each
from storage.tasks import stop_task, wait_event

log = logging.getLogger(__name__)
Doc = dict[str, Any]
Clock = Callable[[], datetime]
FailureHook = Callable[[Doc], Awaitable[None]]
DEFAULT_DELAYS: tuple[float, ...] = (1.0, 4.0, 15.0, 60.0, 300.0)
STALE_SENDING = timedelta(minutes=2)
RECOVER_EVERY = STALE_SENDING.total_seconds() / 4


def to_message(doc: Doc) -> OutboundMessage:
    return OutboundMessage(
        channel=doc["channel"],
        chat_id=doc["chat_id"],
        text=doc["text"],
        idempotency_key=doc["idempotency_key"],
        reply_to=doc.get("reply_to"),
        buttons=tuple(Button(b["label"], b["data"]) for b in doc.get("buttons", [])),
        meta=doc.get("meta", {}),
    )


class Outbox:
    def __init__(
        self,
        db: AsyncDatabase[Doc],
        channels: Mapping[str, Channel],
        clock: Clock,
        delays: Sequence[float] = DEFAULT_DELAYS,
        on_failure: FailureHook | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        self._coll = db[c.OUTBOX]
        self._channels = channels
        self._clock = clock
        self._delays = tuple(delays)
        self._on_failure = on_failure
        self._poll = poll_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self._insert = GroupCommit(insert_each(self._coll, keyed=True))
        self._mark_sent = GroupCommit(set_each(self._coll))

    async def enqueue(self, message: OutboundMessage, *, send_now: bool = True) -> bool:
        """Store ``message``; False when its idempotency key was already stored."""
        doc: Doc = {
            # Its own key: the same message enqueued again meets it (storage.natural_keys).
            "_id": message.idempotency_key,
            "idempotency_key": message.idempotency_key,
            "channel": message.channel,
            "chat_id": clean_text(message.chat_id),
            # Text that cannot be encoded could be neither stored nor sent: U+FFFD instead.
            "text": clean_text(message.text),
            "reply_to": message.reply_to,
            "buttons": [
                {"label": clean_text(b.label), "data": clean_text(b.data)} for b in message.buttons
            ],
            "meta": clean_value(message.meta),
            # Stored already claimed when sending right away: one write fewer, and a
            # crash before the send leaves it "sending", which recover() re-queues.
            "status": "sending" if send_now else "pending",
            "claimed_at": self._clock(),
            "attempts": 1 if send_now else 0,
            "created_at": self._clock(),
            "next_attempt_at": self._clock(),
        }
        try:
            # Together with replies stored meanwhile (storage.group_commit); retried once
            # on a dropped connection, a retry meeting its own copy (same _id) is success.
            await self._insert(doc)
        except DuplicateKeyError:
            return False
        if send_now:
            await self._send_claimed(doc)
        else:
            self._wake.set()
        return True

    async def _claim(self, query: Doc) -> Doc | None:
        # A claim tagged with a token, so a retry after a dropped connection finds the
        # message the first try took instead of taking (and stranding) a second one.
        return await retry.claim(
            self._coll,
            {**query, "status": "pending"},
            {"$set": {"status": "sending", "claimed_at": self._clock()}, "$inc": {"attempts": 1}},
            sort=[("created_at", 1)],
        )

    async def _send_claimed(self, doc: Doc | None) -> None:
        if doc is None:
            return
        channel = self._channels.get(doc["channel"])
        try:
            if channel is None:
                raise SendError(f"channel {doc['channel']!r} is not running", retryable=True)
            result = await channel.send(to_message(doc))
        except SendError as exc:
            await self._failed_attempt(doc, str(exc), exc.retryable, exc.retry_after)
            return
        except Exception as exc:
            log.exception("unexpected error sending outbox %s", doc["idempotency_key"])
            await self._failed_attempt(doc, type(exc).__name__, True)
            return
        now = self._clock()
        sent: Doc = {
            "status": "sent",
            "sent_at": now,
            # No attempt is due any more: the (status, next_attempt_at) index then also
            # finds what was sent recently (agent.alerts.reply_target.last_sent_alert).
            "next_attempt_at": now,
            "external_ids": list(result.external_ids),
            **{f"info.{k}": v for k, v in result.info.items()},
        }
        # $set by _id, so safe to retry; a lost "sent" would have it sent again. Written
        # with the other sends that returned meanwhile, in one command.
        await self._mark_sent((doc["_id"], sent))

    async def _failed_attempt(
        self, doc: Doc, error: str, retryable: bool, retry_after: float | None = None
    ) -> None:
        attempts = int(doc["attempts"])
        if retryable and attempts <= len(self._delays):
            delay = max(self._delays[attempts - 1], retry_after or 0.0)
            again: Doc = {
                "status": "pending",
                "last_error": error,
                "next_attempt_at": self._clock() + timedelta(seconds=delay),
            }
            await retry.retried(  # $set by _id: safe to repeat
                lambda: self._coll.update_one({"_id": doc["_id"]}, {"$set": again}), "requeue"
            )
            log.warning("send to %s failed (attempt %d): %s", doc["channel"], attempts, error)
            self._wake_in(delay)
            return
        failed = {"status": "failed", "last_error": error, "failed_at": self._clock()}
        await retry.retried(  # $set by _id: safe to repeat
            lambda: self._coll.update_one({"_id": doc["_id"]}, {"$set": failed}), "mark failed"
        )
        log.error(
            "giving up on a %s message after %d attempts: %s", doc["channel"], attempts, error
        )
        if self._on_failure is not None:
            try:
                await self._on_failure({**doc, "status": "failed", "last_error": error})
            except Exception:
                log.exception("failure hook raised")

    async def run_due(self) -> int:
        """Send every message that is due now; returns how many were attempted."""
        sent = 0
        while True:
            doc = await self._claim({"next_attempt_at": {"$lte": self._clock()}})
            if doc is None:
                return sent
            sent += 1
            await self._send_claimed(doc)

    def _wake_in(self, delay: float) -> None:
        """Wake the retry loop when a retry falls due, not at the next poll."""
        if self._task is None:
            return

        def fire() -> None:
            self._timers.discard(handle)
            self._wake.set()

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers.add(handle)

    async def recover(self, *, all_sending: bool = False) -> None:
        """Messages left ``sending`` by a process that died go back to ``pending``.

        With ``all_sending`` (this process owns the database, so nobody else can be
        mid-send) they go back at once; otherwise only after ``STALE_SENDING``, since
        another instance on the same MongoDB may still be sending them.
        """
        query: Doc = {"status": "sending"}
        if not all_sending:
            query["claimed_at"] = {"$lt": self._clock() - STALE_SENDING}
        await retry.retried(  # a $set: safe to repeat
            lambda: self._coll.update_many(query, {"$set": {"status": "pending"}}), "recover"
        )

    async def start(self, *, sole_owner: bool = False) -> None:
        await self.recover(all_sending=sole_owner)
        self._task = asyncio.create_task(self._run(), name="outbox")

    async def stop(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await stop_task(self._task)
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        recovered_at = loop.time()  # start() has just recovered
        while True:
            try:
                # Claims go stale only after STALE_SENDING: looking a few times per
                # window is enough, and spares the database a write on every tick.
                if loop.time() - recovered_at >= RECOVER_EVERY:
                    await self.recover()
                    recovered_at = loop.time()
                await self.run_due()
            except Exception:
                log.exception("outbox loop error")
            self._wake.clear()
            await wait_event(self._wake, self._poll)

    async def has(self, idempotency_key: str) -> bool:
        """Whether a message with this key was ever enqueued (its ``_id``)."""
        found = await self._coll.find_one({"_id": idempotency_key}, projection={"_id": 1})
        return found is not None

    async def pending_count(self) -> int:
        return await self._coll.count_documents({"status": {"$in": ["pending", "sending"]}})

    async def failed(self, limit: int = 20) -> list[Doc]:
        return await self._coll.find({"status": "failed"}, limit=limit).to_list()
