"""Where what a channel reads is stored, and the queue the pipeline handles it from.

The transport side of the inbound pipeline (``channels.delivery.pipeline``), as
python-telegram-bot's ``Updater`` is to its ``Application``: ``submit`` stores a
message (its guarantees 1 and 6) before the channel acknowledges it, and puts it on
``updates``; ``recover`` puts there what a dead process left unfinished (guarantee 4).
The pipeline, built once the agent exists, takes them off ``updates`` in order; a
message stored before then waits there, stored and acknowledged. One left in the queue
when the app stops is still unfinished in the inbox, and the next start resumes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.delivery.inbox import failure_reason
from channels.delivery.media import pending_entries
from channels.delivery.text import clean_inbound, clean_text
from channels.types import InboundMessage
from runtime.tasks import stop_task
from storage import collections as c
from storage.coalesce import GroupCommit, insert_each
from storage.collections import inbox_key
from storage.repos.inbox import InboxRow, unfinished, unstorable

log = logging.getLogger(__name__)
STALE_CLAIM = timedelta(minutes=15)
"""Longer than any exchange can take (model retries and tool calls included)."""


@dataclass(frozen=True)
class Received:
    """A message this process has just stored: its ``inbox`` row and the message itself,
    so the handler gets the message as stored rather than one rebuilt from the row."""

    row: InboxRow
    message: InboundMessage


Stored = tuple[str, Received | ObjectId]
"""A message for the pipeline: its conversation, and the message with its stored
document (stored by this process, which handles it as it is) or the ``_id`` of one to
claim first (left by a process that died: ``Intake.claimable``)."""


class Intake:
    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        clock: Callable[[], datetime],
        *,
        reclaim_every: float = STALE_CLAIM.total_seconds() / 4,
    ) -> None:
        self._inbox = db[c.INBOX]
        self._clock = clock
        self.updates: asyncio.Queue[Stored] = asyncio.Queue()
        """What is stored and not yet taken by the pipeline, in the order it came."""
        self._reclaim_every = reclaim_every
        self._reclaims: asyncio.Task[None] | None = None
        """Looks for stale claims again while the database is shared (guarantee 4)."""
        self._stopping = False
        self._sole_owner = False
        """Whether this process owns the database (``recover``): then every unfinished
        message is orphaned, else only those whose claim is stale (``claimable``)."""
        self._store = GroupCommit(insert_each(self._inbox, keyed=True))

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
        row = InboxRow(
            # Its own key: a transport's second delivery meets the first (storage.collections).
            id=inbox_key(message.channel, message.external_id),
            channel=message.channel,
            external_id=message.external_id,
            chat_id=message.chat_id,
            sender_id=message.sender_id,
            sender_name=message.sender_name,
            text=message.text,
            reply_to=message.reply_to,
            meta=message.meta,
            received_at=message.received_at,
            conversation_key=message.conversation_key,
            # Stored already claimed by this process: it handles the message right away.
            status="processing",
            claimed_at=self._clock(),
            attempts=1,
            # Fetched later, once the sender's tier is known (channels.delivery.media).
            media=pending_entries(message.media) if message.media else (),
        )
        try:
            # Stored together with the messages that arrive while a write is in flight
            # (storage.coalesce); each one's duplicate key is still its own.
            await self._store(row.to_doc())
        except DuplicateKeyError:
            log.info("duplicate %s message %s ignored", message.channel, message.external_id)
            return False
        except Exception as exc:
            if not unstorable(exc):
                raise
            return await self._keep_as_failed(message, exc)
        self.updates.put_nowait((message.conversation_key, Received(row, message)))
        return True

    async def _keep_as_failed(self, message: InboundMessage, exc: Exception) -> bool:
        """Keep what can be kept of a message that cannot be stored, as ``failed``."""
        reason, key = failure_reason(exc), clean_text(message.external_id)
        log.error("%s message %s cannot be stored (%s)", message.channel, key, reason)
        channel = clean_text(message.channel)
        row = InboxRow(
            id=inbox_key(channel, key), channel=channel, external_id=key,
            chat_id=clean_text(message.chat_id), sender_id=clean_text(message.sender_id),
            text="", received_at=message.received_at,
            conversation_key=clean_text(message.conversation_key), attempts=0,
            status="failed",
            extra={"error": f"not storable: {reason}", "failed_at": self._clock()},
        )  # fmt: skip
        try:
            await self._inbox.insert_one(row.to_doc())
        except DuplicateKeyError:
            return False
        return True

    async def recover(self, *, sole_owner: bool = False) -> int:
        """Queue messages a dead process stored but did not finish, oldest first.

        ``sole_owner``: this process owns the database, so every unfinished message
        is orphaned; otherwise only those whose claim is older than ``STALE_CLAIM``.
        """
        self._sole_owner = sole_owner
        count = await self._resume(self.claimable())
        if not sole_owner and self._reclaims is None and not self._stopping:
            self._reclaims = asyncio.create_task(self._reclaim_loop(), name="inbox-reclaims")
        return count

    def claimable(self) -> dict[str, Any]:
        """What ``recover`` may claim, now; the same filter guards the claim itself."""
        if self._sole_owner:
            return {"status": {"$in": ["pending", "processing"]}}
        stale = {"status": "processing", "claimed_at": {"$lt": self._clock() - STALE_CLAIM}}
        return {"$or": [{"status": "pending"}, stale]}

    async def _resume(self, query: Mapping[str, Any]) -> int:
        """Queue the messages ``query`` finds, oldest first (claimed as each is handled)."""
        count = 0
        async for key, row_id in unfinished(self._inbox, query):
            self.updates.put_nowait((key, row_id))
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

    async def stop(self) -> None:
        """Stop looking for stale claims; what is queued stays unfinished in the inbox."""
        self._stopping = True
        await stop_task(self._reclaims)
        self._reclaims = None
