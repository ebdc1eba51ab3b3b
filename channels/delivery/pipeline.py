"""The inbound pipeline shared by every channel.

1. ``submit`` stores the message in ``inbox`` under an ``_id`` made of its channel and
   external id (``storage.collections``) before the channel acknowledges its
   transport: a redelivery is a no-op. Under
   load, inbox writes of one kind share one command (``storage.coalesce``).
2. One worker per conversation handles its messages in order; conversations run
   in parallel (optionally bounded; the app leaves model calls to the model's
   adaptive limit).
3. Replies go to the outbox under ``<inbox id>:<n>`` keys, so a message handled
   again after a crash produces no second reply. A reply the handler would give
   again unchanged (``Reply.replayable``: the agent's stored answer) is sent first
   and recorded after, in one write of its own, at once (never batched); a crash in
   between sends it again, the same window as a crash between a send and its "sent"
   mark (``channels.delivery.outbox``).
4. On start, messages a dead process left ``processing`` are handled again: at
   once when this process owns the database, else once their claim is stale (another
   instance on the same MongoDB may still be working on them). Sharing the database,
   it looks again every ``reclaim_every`` seconds: a process that died minutes before
   this one started leaves claims that go stale only later, and they are not left
   until some later restart.
5. Bursts ("hi" / "are you there" / "question...") become one exchange where a
   channel's burst rule asks for it: each message is stored first, one by one; the
   conversation's worker then waits ``window`` seconds after the latest (at most
   ``4 * window`` after the first) and handles them together. The first message
   leads: it lists the burst (``burst_ids``) and the others point at it
   (``burst_leader``), so after a crash the leader handles them together again and
   nothing is answered twice or held only in memory.
6. Text is made storable before the inbox write (``channels.delivery.text``); a message that
   still cannot be stored is kept as ``failed`` and acknowledged. One whose handling
   fails ends ``failed`` with the reason, after any apology (``HandlingFailed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.delivery.envelope import Envelope
from channels.delivery.inbox import (
    REASON_LIMIT,
    envelope_of,
    failure_reason,
    reply_key,
    unstorable,
)
from channels.delivery.media import pending_docs
from channels.delivery.outbox import Outbox
from channels.delivery.text import clean_inbound, clean_text
from channels.types import Channel, HandlingFailed, InboundMessage, OutboundMessage, Reply
from channels.typing_indicator import TypingIndicator
from runtime.tasks import stop_task, wait_event
from storage import collections as c
from storage.coalesce import BOOKKEEPING_LINGER, GroupCommit, insert_each, set_all
from storage.collections import inbox_key

log = logging.getLogger(__name__)
Doc = dict[str, Any]
Handler = Callable[[Envelope], Awaitable[list[Reply]]]
BurstRule = Callable[[InboundMessage], float]
"""Seconds to wait for more messages after this one (0: handle it alone, now)."""
BURST_MAX_ITEMS = 20
STALE_CLAIM = timedelta(minutes=15)
"""Longer than any exchange can take (model retries and tool calls included)."""


@dataclass(frozen=True)
class Stored:
    """A message this process has just stored: its ``inbox`` row and the message itself,
    so the handler gets the message as stored rather than one rebuilt from the row."""

    doc: Doc
    message: InboundMessage


Queued = Stored | list[Stored] | ObjectId
"""What a conversation's worker handles: a message just stored, a burst of them, or
the id of a row a dead process left unfinished (``recover``)."""


class Pipeline:
    def __init__(
        self,
        db: AsyncDatabase[Doc],
        handler: Handler | asyncio.Future[Handler],
        outbox: Outbox,
        channels: Mapping[str, Channel],
        clock: Callable[[], datetime],
        max_concurrency: int | None = None,
        typing_indicator: TypingIndicator | None = None,
        reclaim_every: float = STALE_CLAIM.total_seconds() / 4,
    ) -> None:
        self._inbox = db[c.INBOX]
        self._reclaim_every = reclaim_every
        self._reclaims: asyncio.Task[None] | None = None
        """Looks for stale claims again while the database is shared (guarantee 4)."""
        self._handler = handler
        """The handler, or its future while the app builds it (then the handler itself)."""
        self._outbox = outbox
        self._clock = clock
        self._limit: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext()
        )
        """Handlers running at once (None: as many as conversations; model calls are
        paced by the model's own limit)."""
        self._queues: dict[str, deque[Queued]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._stopping = False
        self._sole_owner = False
        """Whether this process owns the database (``recover``): then every unfinished
        message is orphaned, else only those whose claim is stale (``_claimable``)."""
        self.burst_rules: dict[str, BurstRule] = {}
        """Per channel: how long to gather a burst before handling it."""
        self._arrivals: dict[str, asyncio.Event] = {}
        self.typing = typing_indicator or TypingIndicator(channels)
        self._store = GroupCommit(insert_each(self._inbox, keyed=True))
        self._mark_done = GroupCommit(
            set_all(self._inbox, lambda: {"status": "done", "done_at": self._clock()}),
            linger=BOOKKEEPING_LINGER,  # in a crowd (after the replies: nobody waits on it)
        )

    async def submit(self, message: InboundMessage) -> bool:
        """Store and queue ``message``; False when it was already received.

        A message that cannot be stored is kept as ``failed`` (who, when, why; no text)
        and acknowledged: a poison message never blocks the ones behind it. Only a
        database failure raises, so that the transport delivers it again.
        """
        try:
            message = clean_inbound(message)
        except Exception as exc:  # meta nested absurdly deep, say
            return await self._keep_as_failed(message, exc)
        doc: Doc = {
            # Its own key: a transport's second delivery meets the first (storage.collections).
            "_id": inbox_key(message.channel, message.external_id),
            "channel": message.channel,
            "external_id": message.external_id,
            "chat_id": message.chat_id,
            "sender_id": message.sender_id,
            "sender_name": message.sender_name,
            "text": message.text,
            "reply_to": message.reply_to,
            "meta": message.meta,
            "received_at": message.received_at,
            "conversation_key": message.conversation_key,
            # Stored already claimed by this process: it handles the message right away.
            "status": "processing",
            "claimed_at": self._clock(),
            "attempts": 1,
        }
        if message.media:
            # Fetched later, once the sender's tier is known (channels.delivery.media).
            doc["media"] = pending_docs(message.media)
        try:
            # Stored together with the messages that arrive while a write is in flight
            # (storage.coalesce); each one's duplicate key is still its own.
            await self._store(doc)
        except DuplicateKeyError:
            log.info("duplicate %s message %s ignored", message.channel, message.external_id)
            return False
        except Exception as exc:
            if not unstorable(exc):
                raise
            return await self._keep_as_failed(message, exc)
        self._enqueue(message.conversation_key, Stored(doc, message))
        return True

    async def _keep_as_failed(self, message: InboundMessage, exc: Exception) -> bool:
        """Keep what can be kept of a message that cannot be stored, as ``failed``."""
        reason, key = failure_reason(exc), clean_text(message.external_id)
        log.error("%s message %s cannot be stored (%s)", message.channel, key, reason)
        channel = clean_text(message.channel)
        doc: Doc = {
            "_id": inbox_key(channel, key), "channel": channel, "external_id": key,
            "chat_id": clean_text(message.chat_id), "sender_id": clean_text(message.sender_id),
            "text": "", "received_at": message.received_at,
            "conversation_key": clean_text(message.conversation_key), "attempts": 0,
            "status": "failed", "error": f"not storable: {reason}", "failed_at": self._clock(),
        }  # fmt: skip
        try:
            await self._inbox.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    def _enqueue(self, key: str, item: Queued) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(item)
        arrived = self._arrivals.get(key)
        if arrived is not None:
            arrived.set()
        if key not in self._workers and not self._stopping:
            self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"conv:{key}")

    async def _work(self, key: str, queue: deque[Queued]) -> None:
        rules = self.burst_rules
        try:
            while queue:
                item = queue.popleft()
                try:
                    if rules and isinstance(item, Stored) and self._window(item) > 0:
                        item = await self._gather(key, queue, item)
                    await self._process(item)
                except Exception:
                    log.exception("handling a message in %s failed", key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)
            elif not self._stopping:  # a message arrived while we were exiting
                self._workers[key] = asyncio.create_task(self._work(key, queue))

    async def _process(self, item: Queued) -> None:
        """Handle one stored message (or burst).

        A message this process just stored is owned by it and handled directly; one
        found by ``recover`` is claimed atomically first, so two instances on one
        database never both handle it, and its earlier replies are not produced again.
        """
        replayed = False
        if isinstance(item, Stored):  # the common case: the message itself, as stored
            members = [item.doc]
            envelope = Envelope(
                item.message, inbox_id=str(item.doc["_id"]), has_media=bool(item.message.media)
            )
        elif isinstance(item, list):  # a burst gathered here
            members = [m.doc for m in item]
            envelope = envelope_of(members)
        else:
            doc = await self._inbox.find_one_and_update(
                {"_id": item, **self._claimable()},
                {"$set": {"claimed_at": self._clock(), "status": "processing"},
                 "$inc": {"attempts": 1}},
                # As claimed: its attempts count this one, so the handler knows it is a
                # replay and reads back an answer stored before the crash.
                return_document=ReturnDocument.AFTER,
            )  # fmt: skip
            if doc is None:
                return
            if doc.get("burst_leader") not in (None, doc["_id"]):
                return  # its burst's leader handles it, and marks it done
            replayed = await self._outbox.has(reply_key(doc["_id"], 0))
            members = await self._burst_rows(doc)
            # The handler learns which stored message this is, and whether an earlier
            # attempt may already have answered it (so it can reuse that answer).
            envelope = envelope_of(members)
        inbox_id: ObjectId = members[0]["_id"]
        if not replayed:
            chat = envelope.message
            failure: str | None = None
            try:
                async with self._limit:
                    typing = asyncio.create_task(
                        self.typing.keep_typing(chat.channel, chat.chat_id)
                    )
                    try:
                        handler = self._handler
                        if isinstance(handler, asyncio.Future):  # the app is building it
                            handler = self._handler = await self._handler_built(handler)
                        replies = await handler(envelope)
                    finally:
                        typing.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await typing
            except HandlingFailed as exc:
                replies, failure = list(exc.replies), clean_text(exc.reason)[:REASON_LIMIT]
                log.warning("message %s failed: %s", inbox_id, failure)
            except Exception as exc:
                # Ends here, as "failed": a restart does not run (and bill) it again.
                log.exception("handling message %s failed", inbox_id)
                replies, failure = [], failure_reason(exc)
            for n, reply in enumerate(replies):
                outbound = OutboundMessage(
                    channel=reply.channel or chat.channel,
                    chat_id=reply.chat_id or chat.chat_id,
                    text=reply.text,
                    idempotency_key=reply_key(inbox_id, n),
                    buttons=reply.buttons,
                    meta=reply.meta,
                )
                if reply.replayable and failure is None:
                    # Stored after it is sent: a crash before that handles the message
                    # again, and the handler gives the same reply (no write before it).
                    await self._outbox.send_then_record(outbound)
                else:
                    await self._outbox.enqueue(outbound)
            if failure is not None:
                await self._inbox.update_many(
                    {"_id": {"$in": [m["_id"] for m in members]}},
                    {"$set": {"status": "failed", "error": failure, "failed_at": self._clock()}},
                )
                return
        # With the others marked done meanwhile: one $set by _id, safe to repeat.
        await self._mark_done([m["_id"] for m in members], crowded=self._crowded())

    def _crowded(self) -> bool:
        """Other conversations are at work: more replies and "done" marks are coming."""
        return len(self._workers) > 1

    def _window(self, item: Stored) -> float:
        rule = self.burst_rules.get(item.message.channel)
        return rule(item.message) if rule is not None else 0.0

    async def _gather(self, key: str, queue: deque[Queued], first: Stored) -> Queued:
        """Wait for the rest of a burst, then make ``first`` its leader (stored)."""
        window = self._window(first)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 4 * window
        while len(queue) < BURST_MAX_ITEMS:
            wait = min(window, give_up - loop.time())
            if wait <= 0:
                break
            arrived = self._arrivals[key] = asyncio.Event()
            try:
                if not await wait_event(arrived, wait):
                    break
            finally:
                self._arrivals.pop(key, None)
        members = [first]
        while queue and len(members) < BURST_MAX_ITEMS:
            nxt = queue[0]
            if not isinstance(nxt, Stored) or self._window(nxt) <= 0:
                break
            members.append(nxt)
            queue.popleft()
        if len(members) == 1:
            return first
        ids = [m.doc["_id"] for m in members]
        await self._inbox.update_many({"_id": {"$in": ids[1:]}}, {"$set": {"burst_leader": ids[0]}})
        await self._inbox.update_one({"_id": ids[0]}, {"$set": {"burst_ids": ids}})
        return members

    async def _burst_rows(self, doc: Doc) -> list[Doc]:
        """The stored rows of the burst ``doc`` leads, in order (itself alone if none):
        a burst a dead process gathered, handled again."""
        ids = doc.get("burst_ids")
        if not ids:
            return [doc]
        found = {d["_id"]: d async for d in self._inbox.find({"_id": {"$in": ids}})}
        return [found.get(i, doc) if i != doc["_id"] else doc for i in ids if i in found]

    @staticmethod
    async def _handler_built(handler: asyncio.Future[Handler]) -> Handler:
        """The handler, once the app has built it (a message stored and acknowledged
        during start-up waits here); shielded: the future is shared by every worker."""
        return await asyncio.shield(handler)

    async def recover(self, *, sole_owner: bool = False) -> int:
        """Queue messages a dead process stored but did not finish, oldest first.

        ``sole_owner``: this process owns the database, so every unfinished message
        is orphaned; otherwise only those whose claim is older than ``STALE_CLAIM``.
        """
        self._sole_owner = sole_owner
        count = await self._resume(self._claimable())
        if not sole_owner and self._reclaims is None and not self._stopping:
            self._reclaims = asyncio.create_task(self._reclaim_loop(), name="inbox-reclaims")
        return count

    def _claimable(self) -> Doc:
        """What ``recover`` may claim, now; the same filter guards the claim itself."""
        if self._sole_owner:
            return {"status": {"$in": ["pending", "processing"]}}
        stale = {"status": "processing", "claimed_at": {"$lt": self._clock() - STALE_CLAIM}}
        return {"$or": [{"status": "pending"}, stale]}

    async def _resume(self, query: Doc) -> int:
        """Queue the messages ``query`` finds, oldest first (claimed as each is handled)."""
        cursor = self._inbox.find(
            query, projection={"conversation_key": 1}, sort=[("received_at", 1)]
        )
        count = 0
        async for doc in cursor:
            self._enqueue(doc["conversation_key"], doc["_id"])
            count += 1
        if count:
            log.info("resuming %d unfinished inbound messages", count)
        return count

    async def _reclaim_loop(self) -> None:
        """Every ``reclaim_every`` seconds, messages whose claim went stale since the
        last look (their process died): handled here, each claimed first."""
        while True:
            await asyncio.sleep(self._reclaim_every)
            stale = {"status": "processing", "claimed_at": {"$lt": self._clock() - STALE_CLAIM}}
            try:
                await self._resume(stale)
            except Exception:  # the database away for a moment: the next look finds them
                log.warning("looking for unfinished inbound messages failed", exc_info=True)

    async def join(self) -> None:
        """Wait until every queued message has been handled (tests, shutdown)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def stop(self, grace: float = 10.0) -> None:
        self._stopping = True
        await stop_task(self._reclaims)
        self._reclaims = None
        workers = list(self._workers.values())
        if workers:
            try:
                await asyncio.wait(workers, timeout=grace)
            finally:
                # All at once, and also when this stop is itself cancelled (the app's
                # stop deadline passed): a message cut off stays unfinished (4.).
                for task in workers:
                    task.cancel()
            for task in workers:
                await stop_task(task)
        await self._mark_done.flush()  # "done" marks waiting for company
