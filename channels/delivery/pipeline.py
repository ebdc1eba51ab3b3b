"""The inbound pipeline shared by every channel.

1. ``Intake.submit`` (``channels.delivery.intake``) stores the message in ``inbox``
   under an ``_id`` made of its channel and external id (``storage.collections``)
   before the channel acknowledges its transport: a redelivery is a no-op. Under
   load, inbox writes of one kind share one command (``storage.coalesce``). It puts
   the stored message on its ``updates`` queue, which the pipeline takes it from
   (python-telegram-bot's ``update_queue``): the pipeline is built once, with its
   handler and burst rules, when the agent exists, and what was stored before waits
   in the queue.
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
from datetime import datetime
from types import MappingProxyType
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.envelope import Envelope
from channels.delivery.inbox import REASON_LIMIT, envelope_of, failure_reason, reply_key
from channels.delivery.intake import STALE_CLAIM, Intake, Received
from channels.delivery.outbox import Outbox
from channels.delivery.text import clean_text
from channels.types import Channel, HandlingFailed, InboundMessage, OutboundMessage, Reply
from channels.typing_indicator import TypingIndicator
from runtime.tasks import stop_task, wait_event
from storage import collections as c
from storage.coalesce import BOOKKEEPING_LINGER, GroupCommit, set_all
from storage.repos.inbox import InboxRow

log = logging.getLogger(__name__)
Handler = Callable[[Envelope], Awaitable[list[Reply]]]
BurstRule = Callable[[InboundMessage], float]
"""Seconds to wait for more messages after this one (0: handle it alone, now)."""
BURST_MAX_ITEMS = 20
Queued = Received | list[Received] | ObjectId
"""What a conversation's worker handles: a message just stored, a burst of them, or
the id of a row a dead process left unfinished (``recover``)."""
__all__ = ["STALE_CLAIM", "BurstRule", "Handler", "Intake", "Pipeline"]


class Pipeline:
    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        handler: Handler,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        clock: Callable[[], datetime],
        max_concurrency: int | None = None,
        typing_indicator: TypingIndicator | None = None,
        reclaim_every: float = STALE_CLAIM.total_seconds() / 4,
        *,
        burst_rules: Mapping[str, BurstRule] | None = None,
        intake: Intake | None = None,
    ) -> None:
        """``intake``: where the channels' messages are stored and queued (the app's,
        started before the agent); None: one of its own (a pipeline used alone, whose
        ``submit`` and ``recover`` are its intake's). ``burst_rules``: per channel, how
        long to gather a burst before handling it."""
        self._inbox = db[c.INBOX]
        self._own_intake = intake is None
        self.intake = intake or Intake(db, clock, reclaim_every=reclaim_every)
        self._consumer: asyncio.Task[None] | None = None
        """Takes stored messages off ``intake.updates`` to their conversations' workers."""
        self._handler = handler
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
        self._burst_rules = MappingProxyType(dict(burst_rules or {}))
        self._arrivals: dict[str, asyncio.Event] = {}
        self.typing = typing_indicator or TypingIndicator(channels)
        self._mark_done = GroupCommit(
            set_all(self._inbox, lambda: {"status": "done", "done_at": self._clock()}),
            linger=BOOKKEEPING_LINGER,  # in a crowd (after the replies: nobody waits on it)
        )

    def start(self) -> None:
        """Handle what the intake stores, from what waits in its queue on."""
        if self._consumer is None and not self._stopping:
            self._consumer = asyncio.create_task(self._consume(), name="inbox-updates")

    async def _consume(self) -> None:
        """Each stored message to its conversation's queue, whose worker starts if none
        runs (one per conversation, in order)."""
        updates = self.intake.updates
        while True:
            key, item = await updates.get()
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = deque()
            queue.append(item)
            arrived = self._arrivals.get(key)
            if arrived is not None:
                arrived.set()
            if key not in self._workers and not self._stopping:
                self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"conv:{key}")
            updates.task_done()

    async def submit(self, message: InboundMessage) -> bool:
        """Store and queue ``message`` (``Intake.submit``); False when it was already
        received. Starts this pipeline if it was not (a pipeline used alone)."""
        self.start()
        return await self.intake.submit(message)

    async def recover(self, *, sole_owner: bool = False) -> int:
        """Queue what a dead process left unfinished (``Intake.recover``)."""
        self.start()
        return await self.intake.recover(sole_owner=sole_owner)

    async def _work(self, key: str, queue: deque[Queued]) -> None:
        rules = self._burst_rules
        try:
            while queue:
                item = queue.popleft()
                try:
                    if rules and isinstance(item, Received) and self._window(item) > 0:
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
        if isinstance(item, Received):  # the common case: the message itself, as stored
            members = [item.row]
            envelope = Envelope(
                item.message, inbox_id=str(item.row.id), has_media=bool(item.message.media)
            )
        elif isinstance(item, list):  # a burst gathered here
            members = [m.row for m in item]
            envelope = envelope_of(members)
        else:
            doc = await self._inbox.find_one_and_update(
                {"_id": item, **self.intake.claimable()},
                {"$set": {"claimed_at": self._clock(), "status": "processing"},
                 "$inc": {"attempts": 1}},
                # As claimed: its attempts count this one, so the handler knows it is a
                # replay and reads back an answer stored before the crash.
                return_document=ReturnDocument.AFTER,
            )  # fmt: skip
            if doc is None:
                return
            row = InboxRow.from_doc(doc)
            if row.burst_leader not in (None, row.id):
                return  # its burst's leader handles it, and marks it done
            replayed = await self._outbox.has(reply_key(row.id, 0))
            members = await self._burst_rows(row)
            # The handler learns which stored message this is, and whether an earlier
            # attempt may already have answered it (so it can reuse that answer).
            envelope = envelope_of(members)
        inbox_id = members[0].id
        if not replayed:
            chat = envelope.message
            failure: str | None = None
            try:
                async with self._limit:
                    typing = asyncio.create_task(
                        self.typing.keep_typing(chat.channel, chat.chat_id)
                    )
                    try:
                        replies = await self._handler(envelope)
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
                    {"_id": {"$in": [m.id for m in members]}},
                    {"$set": {"status": "failed", "error": failure, "failed_at": self._clock()}},
                )
                return
        # With the others marked done meanwhile: one $set by _id, safe to repeat.
        await self._mark_done([m.id for m in members], crowded=self._crowded())

    def _crowded(self) -> bool:
        """Other conversations are at work: more replies and "done" marks are coming."""
        return len(self._workers) > 1

    def _window(self, item: Received) -> float:
        rule = self._burst_rules.get(item.message.channel)
        return rule(item.message) if rule is not None else 0.0

    async def _gather(self, key: str, queue: deque[Queued], first: Received) -> Queued:
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
            if not isinstance(nxt, Received) or self._window(nxt) <= 0:
                break
            members.append(nxt)
            queue.popleft()
        if len(members) == 1:
            return first
        ids = [m.row.id for m in members]
        await self._inbox.update_many({"_id": {"$in": ids[1:]}}, {"$set": {"burst_leader": ids[0]}})
        await self._inbox.update_one({"_id": ids[0]}, {"$set": {"burst_ids": ids}})
        return members

    async def _burst_rows(self, row: InboxRow) -> list[InboxRow]:
        """The stored rows of the burst ``row`` leads, in order (itself alone if none):
        a burst a dead process gathered, handled again."""
        ids = row.burst_ids
        if not ids:
            return [row]
        rows = self._inbox.find({"_id": {"$in": list(ids)}})
        found = {r.id: r for r in [InboxRow.from_doc(d) async for d in rows]}
        return [found[i] if i != row.id else row for i in ids if i in found]

    async def join(self) -> None:
        """Wait until every queued message has been handled (tests, shutdown)."""
        if self._consumer is not None and not self._consumer.done():
            await self.intake.updates.join()  # each taken to its conversation's worker
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def stop(self, grace: float = 10.0) -> None:
        self._stopping = True
        await stop_task(self._consumer)
        if self._own_intake:
            await self.intake.stop()
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
