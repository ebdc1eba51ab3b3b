"""Inbox and outbox rows keyed by what identifies them, instead of by a unique index.

Each message the transports deliver is stored once (``channels.pipeline``) and each
outbound message is sent once per idempotency key (``channels.outbox``). Both used to
be enforced by a unique secondary index, ``(channel, external_id)`` and
``idempotency_key``. In SecantusDB every write of a row also writes each of its index
entries, and a unique index pays for a second table of claims on top: those two
indexes were about 1.7 ms of the database's ~5.5 ms of CPU per message
(``bench/profile_burst.py``). The ``_id`` index is there anyway, so the key now lives
in ``_id``:

* an outbox row's ``_id`` is its idempotency key (the field is kept as well);
* an inbox row's ``_id`` is ``inbox_key(channel, external_id)``, an ``ObjectId`` made of
  12 bytes of BLAKE2b of the two, so everything that handles inbox ids is unchanged.

Stores written by earlier versions have rows with random ``ObjectId``s and the old
indexes. ``retire_legacy_keys`` runs as the store opens:

* the outbox rows of the last ``REPLAY_WINDOW`` (the only ones a replay or an alert
  step can enqueue again) are copied under their key and the copies with the random
  ``_id`` removed; then the ``idempotency_key`` index is dropped. Each step can be
  repeated, so a crash half-way is finished by the next start. Older rows keep their
  ``_id``; nothing looks them up by key any more.
* inbox ids are referenced elsewhere (messages, replies' keys, media), so inbox rows
  keep theirs. The ``(channel, external_id)`` index keeps refusing redeliveries of
  them until no row received in the last ``REPLAY_WINDOW`` has an old-style id, and
  is dropped then.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.inbox_window import received_since
from storage.indexes import drop_index

log = logging.getLogger(__name__)
Doc = dict[str, Any]
REPLAY_WINDOW = timedelta(days=7)
"""How long a message may be delivered again, or a send enqueued again (a replay after
a crash, an alert step tried again); also how long ``tool_effects`` are kept."""
LEGACY_INBOX_INDEX = "channel_1_external_id_1"
LEGACY_OUTBOX_INDEX = "idempotency_key_1"


def inbox_key(channel: str, external_id: str) -> ObjectId:
    """The ``_id`` of the inbox row of the message ``external_id`` on ``channel``."""
    raw = f"{len(channel)}:{channel}{external_id}".encode("utf-8", "surrogatepass")
    return ObjectId(hashlib.blake2b(raw, digest_size=12).digest())


async def retire_legacy_keys(db: AsyncDatabase[Doc], now: datetime) -> None:
    """Bring a store written by an earlier version to ``_id`` keys (module docstring);
    on a store that has none left, three small commands at start-up (an indexed read
    that finds nothing, a drop of an index that is gone, a list of the inbox's indexes),
    beside the index builds."""
    cutoff = now - REPLAY_WINDOW
    await _rekey_outbox(db[c.OUTBOX], cutoff)
    await _retire_inbox_index(db[c.INBOX], cutoff)


async def _rekey_outbox(outbox: AsyncCollection[Doc], cutoff: datetime) -> None:
    # Only ObjectIds compare with an ObjectId (type bracketing), so string keys are not
    # read: this is a range on the _id index holding the recent old-style rows alone.
    recent = [d async for d in outbox.find({"_id": {"$gte": ObjectId.from_datetime(cutoff)}})]
    await drop_index(outbox, LEGACY_OUTBOX_INDEX)  # else each copy would clash on it
    moved = 0
    for doc in recent:
        key = doc.get("idempotency_key")
        if not isinstance(doc["_id"], ObjectId) or not isinstance(key, str):
            continue  # already keyed (a server without type bracketing), or no key
        # A start that stopped before removing the original may have copied it already.
        with contextlib.suppress(DuplicateKeyError):
            await outbox.insert_one({**doc, "_id": key})
        await outbox.delete_one({"_id": doc["_id"]})
        moved += 1
    if moved:
        log.info("outbox: %d recent message(s) re-keyed by their idempotency key", moved)


async def _retire_inbox_index(inbox: AsyncCollection[Doc], cutoff: datetime) -> None:
    if LEGACY_INBOX_INDEX not in await inbox.index_information():
        return
    projection = {"channel": 1, "external_id": 1}
    async for doc in received_since(inbox, cutoff, projection=projection):
        if doc["_id"] != inbox_key(str(doc.get("channel")), str(doc.get("external_id"))):
            return  # may still be delivered again: the old index keeps refusing it
    await drop_index(inbox, LEGACY_INBOX_INDEX)
    log.info("inbox: the (channel, external_id) index is no longer needed; dropped")
