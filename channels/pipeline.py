"""The inbound pipeline shared by every channel.

1. ``submit`` stores the message in ``inbox`` under a unique (channel, external id)
   before the channel acknowledges its transport: a redelivery is a no-op.
2. One worker per conversation handles its messages in order; conversations run
   in parallel, with a bound on concurrent handler (model) calls.
3. Replies go to the outbox under ``<inbox id>:<n>`` keys, so a message handled
   again after a crash produces no second reply.
4. On start, messages a dead process left ``processing`` are handled again: at
   once when this process owns the database, else once their claim is stale (another
   instance on the same MongoDB may still be working on them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.outbox import Outbox
from channels.types import Channel, InboundMessage, OutboundMessage, Reply
from storage import collections as c

log = logging.getLogger(__name__)
Doc = dict[str, Any]
Handler = Callable[[InboundMessage], Awaitable[list[Reply]]]
TYPING_EVERY = 4.0
STALE_CLAIM = timedelta(minutes=15)
"""Longer than any exchange can take (model retries and tool calls included)."""


def _from_doc(doc: Doc) -> InboundMessage:
    return InboundMessage(
        channel=doc["channel"],
        external_id=doc["external_id"],
        chat_id=doc["chat_id"],
        sender_id=doc["sender_id"],
        text=doc["text"],
        received_at=doc["received_at"],
        sender_name=doc.get("sender_name", ""),
        reply_to=doc.get("reply_to"),
        meta=doc.get("meta", {}),
    )


class Pipeline:
    def __init__(
        self,
        db: AsyncDatabase[Doc],
        handler: Handler,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        clock: Callable[[], datetime],
        max_concurrency: int = 8,
    ) -> None:
        self._inbox = db[c.INBOX]
        self._handler = handler
        self._outbox = outbox
        self._channels = channels
        self._clock = clock
        self._limit = asyncio.Semaphore(max_concurrency)
        self._queues: dict[str, asyncio.Queue[Doc | ObjectId]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._stopping = False
        self._recoverable: Doc = {"status": "pending"}
        """What ``recover`` may claim; the same filter guards the claim itself."""

    async def submit(self, message: InboundMessage) -> bool:
        """Store and queue ``message``; False when it was already received."""
        doc: Doc = {
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
        try:
            await self._inbox.insert_one(doc)
        except DuplicateKeyError:
            log.info("duplicate %s message %s ignored", message.channel, message.external_id)
            return False
        self._enqueue(message.conversation_key, doc)
        return True

    def _enqueue(self, key: str, item: Doc | ObjectId) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = asyncio.Queue()
        queue.put_nowait(item)
        if key not in self._workers and not self._stopping:
            self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"conv:{key}")

    async def _work(self, key: str, queue: asyncio.Queue[Doc | ObjectId]) -> None:
        try:
            while not queue.empty():
                item = queue.get_nowait()
                try:
                    await self._process(item)
                except Exception:
                    log.exception("handling a message in %s failed", key)
        finally:
            self._workers.pop(key, None)
            if queue.empty():
                self._queues.pop(key, None)
            elif not self._stopping:  # a message arrived while we were exiting
                self._workers[key] = asyncio.create_task(self._work(key, queue))

    async def _process(self, item: Doc | ObjectId) -> None:
        """Handle one stored message.

        A message this process just stored is owned by it and handled directly; one
        found by ``recover`` is claimed atomically first, so two instances on one
        database never both handle it, and its earlier replies are not produced again.
        """
        if isinstance(item, ObjectId):
            doc = await self._inbox.find_one_and_update(
                {"_id": item, **self._recoverable},
                {"$set": {"claimed_at": self._clock(), "status": "processing"},
                 "$inc": {"attempts": 1}},
            )  # fmt: skip
            if doc is None:
                return
            replayed = await self._outbox_has_replies(doc["_id"])
        else:
            doc, replayed = item, False
        inbox_id: ObjectId = doc["_id"]
        if not replayed:
            message = _from_doc(doc)
            # The handler learns which stored message this is, and whether an earlier
            # attempt may already have answered it (so it can reuse that answer).
            meta = {**message.meta, "inbox_id": str(inbox_id)}
            if int(doc.get("attempts", 1)) > 1:
                meta["replay"] = True
            message = dataclasses.replace(message, meta=meta)
            replies = await self._handle(message)
            for n, reply in enumerate(replies):
                await self._outbox.enqueue(self._outbound(message, inbox_id, n, reply))
        await self._inbox.update_one(
            {"_id": inbox_id}, {"$set": {"status": "done", "done_at": self._clock()}}
        )

    async def _outbox_has_replies(self, inbox_id: ObjectId) -> bool:
        outbox = self._inbox.database[c.OUTBOX]
        return await outbox.find_one({"idempotency_key": f"{inbox_id}:0"}) is not None

    async def _handle(self, message: InboundMessage) -> list[Reply]:
        async with self._limit:
            typing = asyncio.create_task(self._keep_typing(message))
            try:
                return await self._handler(message)
            finally:
                typing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await typing

    async def _keep_typing(self, message: InboundMessage) -> None:
        channel = self._channels.get(message.channel)
        if channel is None:
            return
        while True:
            try:
                await channel.typing(message.chat_id)
            except Exception:
                log.debug("typing indicator failed", exc_info=True)
            await asyncio.sleep(TYPING_EVERY)

    @staticmethod
    def _outbound(
        message: InboundMessage, inbox_id: ObjectId, n: int, reply: Reply
    ) -> OutboundMessage:
        return OutboundMessage(
            channel=reply.channel or message.channel,
            chat_id=reply.chat_id or message.chat_id,
            text=reply.text,
            idempotency_key=f"{inbox_id}:{n}",
            buttons=reply.buttons,
            meta=reply.meta,
        )

    async def recover(self, *, sole_owner: bool = False) -> int:
        """Queue messages a dead process stored but did not finish, oldest first.

        ``sole_owner``: this process owns the database, so every unfinished message
        is orphaned; otherwise only those whose claim is older than ``STALE_CLAIM``.
        """
        query: Doc = {"status": {"$in": ["pending", "processing"]}}
        if not sole_owner:
            query = {
                "$or": [
                    {"status": "pending"},
                    {"status": "processing", "claimed_at": {"$lt": self._clock() - STALE_CLAIM}},
                ]
            }
        self._recoverable = query
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

    async def join(self) -> None:
        """Wait until every queued message has been handled (tests, shutdown)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def stop(self, grace: float = 10.0) -> None:
        self._stopping = True
        workers = list(self._workers.values())
        if workers:
            _done, pending = await asyncio.wait(workers, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
