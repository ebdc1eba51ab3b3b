"""Inbound photos and voice notes: from an announced ``MediaItem`` to a GridFS file.

1. The pipeline stores each item in the inbox row as ``pending`` (with ``source``,
   how the channel fetches it) before the transport is acknowledged; nothing is
   downloaded yet, so a crash loses nothing.
2. ``MediaFetcher`` runs only for a message the model is about to read, as the
   agent builds its turn (``agent.conversation.media_turn``): a stranger's media, or
   a directive's, is never downloaded.
3. Announced size and duration are checked before any download; the bytes are
   counted while downloading and reading stops past ``max_bytes``. Either way the
   item ends ``too_large`` with a polite note for the model.
4. A file is stored under ``<channel>:<external id>:<index>``: a retry after a crash
   finds it and neither downloads nor stores it again (``MediaStore``).

``MediaStore`` keeps each file once in GridFS (bucket ``media``), wherever the
database lives, under the key the fetcher chooses; a unique index on that key makes
``put`` idempotent, also when two attempts race: the loser's chunks are removed and
the winner's id is returned. ``gridfs`` is imported when a file is first stored or
read: most processes never see a photo.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from bson import ObjectId
from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from channels.types import Channel, MediaItem, MediaRefused, MediaSource, MediaTooLarge
from storage import collections as c
from storage.repos.inbox import InboxRow, MediaEntry

if TYPE_CHECKING:
    from gridfs import AsyncGridFSBucket

log = logging.getLogger(__name__)
FETCH_TIMEOUT = 180.0
"""Seconds one download may take (a stuck transport must not hold the exchange)."""
BUCKET = "media"
KEY_FIELD = "metadata.key"
"""Where a stored file's key is: GridFS keeps the caller's fields under ``metadata``."""


@dataclass(frozen=True)
class MediaCaps:
    max_bytes: int = 20_000_000
    max_audio_seconds: int = 600


class Fetched(TypedDict, total=False):
    """What fetching one item sets on it (``media.<index>.<field>``)."""

    status: str
    note: str
    file_id: ObjectId
    size: int


def pending_entries(items: tuple[MediaItem, ...]) -> tuple[MediaEntry, ...]:
    """The inbox row's ``media`` for a message just received."""
    return tuple(
        MediaEntry(kind=m.kind, mime=m.mime, size=m.size, duration_s=m.duration_s,
                   name=m.name, source=dict(m.source), status="pending")
        for m in items
    )  # fmt: skip


def _label(entry: MediaEntry) -> str:
    return "voice note" if entry.kind == "audio" else "photo"


def _minutes(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else f"{round(seconds / 60)} min"


def _megabytes(size: int) -> str:
    if size < 1_000_000:
        return f"{round(size / 1000)} kB" if size >= 1000 else f"{size} bytes"
    return f"{size / 1_000_000:.1f}".removesuffix(".0") + " MB"


def too_long_note(entry: MediaEntry, caps: MediaCaps) -> str | None:
    """The note for an item whose announced duration or size is over a cap, else None."""
    duration, size = entry.duration_s, entry.size
    if entry.kind == "audio" and duration is not None and duration > caps.max_audio_seconds:
        return (
            f"[{_label(entry)} of {_minutes(duration)}: too long to listen to; "
            f"limit {_minutes(caps.max_audio_seconds)}]"
        )
    if size is not None and size > caps.max_bytes:
        return too_large_note(entry, caps, size)
    return None


def too_large_note(entry: MediaEntry, caps: MediaCaps, size: int | None = None) -> str:
    verb = "listen to" if entry.kind == "audio" else "look at"
    of = f" of {_megabytes(size)}" if size is not None else ""
    return f"[{_label(entry)}{of}: too large to {verb}; limit {_megabytes(caps.max_bytes)}]"


class MediaStore:
    """Files stored once in GridFS, each under its key (module docstring, point 4)."""

    def __init__(self, db: AsyncDatabase[dict[str, Any]]) -> None:
        self._db = db
        self._gridfs: AsyncGridFSBucket | None = None
        self._files = db[f"{BUCKET}.files"]
        self._indexed = False

    async def _ensure_index(self) -> None:
        if not self._indexed:
            await self._files.create_index([(KEY_FIELD, ASCENDING)], unique=True, name="media_key")
            self._indexed = True

    @property
    def _bucket(self) -> AsyncGridFSBucket:
        if self._gridfs is None:
            from gridfs import AsyncGridFSBucket

            self._gridfs = AsyncGridFSBucket(self._db, bucket_name=BUCKET)
        return self._gridfs

    async def find(self, key: str) -> ObjectId | None:
        """The id of the file stored under ``key``, if any (so a retry skips the download)."""
        doc = await self._files.find_one({KEY_FIELD: key}, projection={"_id": 1})
        return None if doc is None else ObjectId(doc["_id"])

    async def put(self, data: bytes, *, key: str, mime: str, kind: str) -> ObjectId:
        """Store ``data`` under ``key``; a second put with the same key returns the first
        file's id without writing."""
        await self._ensure_index()
        found = await self.find(key)
        if found is not None:
            return found
        from gridfs.errors import FileExists

        metadata = {"key": key, "mime": mime, "kind": kind}
        file_id = ObjectId()
        upload = self._bucket.open_upload_stream_with_id(file_id, key, metadata=metadata)
        try:
            await upload.write(data)
            await upload.close()
        except (FileExists, DuplicateKeyError):
            await upload.abort()  # our own chunks only: the files row was refused
            found = await self.find(key)
            if found is None:
                raise
            return found
        except Exception:
            await upload.abort()
            raise
        return file_id

    async def get(self, file_id: ObjectId | str) -> bytes:
        """The bytes of a stored file; ``gridfs.NoFile`` when there is none."""
        stream = await self._bucket.open_download_stream(ObjectId(file_id))
        data: bytes = await stream.read()
        return data

    async def set_transcript(self, inbox_id: ObjectId | str, index: int, text: str) -> None:
        """Keep a voice note's transcript with its message (``media.<index>.transcript``)."""
        await self._db[c.INBOX].update_one(
            {"_id": ObjectId(inbox_id)}, {"$set": {f"media.{int(index)}.transcript": text}}
        )


class MediaFetcher:
    """Downloads and stores the pending media of a message the agent is about to read."""

    def __init__(
        self,
        db: AsyncDatabase[dict[str, Any]],
        store: MediaStore,
        channels: Mapping[str, Channel],
        caps: MediaCaps = MediaCaps(),
    ) -> None:
        self._inbox = db[c.INBOX]
        self._store = store
        self._channels = channels
        self._caps = caps

    async def fetch_row(self, row: InboxRow) -> list[str]:
        """Fetch every pending item of one inbox row; the notes of those not stored."""
        notes: list[str] = []
        for index, item in enumerate(row.media):
            status, note = item.status, item.note
            if status == "pending":
                fetched = await self._fetch_one(row, index, item)
                status, note = fetched.get("status", status), fetched.get("note", note)
            if status != "stored" and note:
                notes.append(note)
        return notes

    async def _fetch_one(self, row: InboxRow, index: int, item: MediaEntry) -> Fetched:
        key = f"{row.channel}:{row.external_id}:{index}"
        result = await self._download(row, key, item)
        sets = {f"media.{index}.{k}": v for k, v in result.items()}
        await self._inbox.update_one(
            {"_id": row.id, f"media.{index}.status": "pending"},
            {"$set": sets, "$unset": {f"media.{index}.source": ""}},
        )
        return result

    async def _download(self, row: InboxRow, key: str, item: MediaEntry) -> Fetched:
        caps, label = self._caps, _label(item)
        over = too_long_note(item, caps)
        if over is not None:
            return {"status": "too_large", "note": over}
        file_id = await self._store.find(key)  # stored before a crash: no second download
        if file_id is not None:
            return {"status": "stored", "file_id": file_id}
        channel = self._channels.get(row.channel)
        if not isinstance(channel, MediaSource):
            return {"status": "failed", "note": f"[{label}: this channel cannot fetch it]"}
        try:
            async with asyncio.timeout(FETCH_TIMEOUT):
                data = await channel.fetch_media(dict(item.source), caps.max_bytes)
        except MediaTooLarge:
            return {"status": "too_large", "note": too_large_note(item, caps)}
        except MediaRefused as exc:
            log.warning("%s media %s refused: %s", row.channel, key, exc)
            return {"status": "refused", "note": f"[{label}: not downloaded ({exc})]"}
        except Exception as exc:
            log.warning("%s media %s could not be fetched: %s", row.channel, key, exc)
            return {"status": "failed", "note": f"[{label}: could not be downloaded]"}
        file_id = await self._store.put(data, key=key, mime=item.mime, kind=item.kind)
        return {"status": "stored", "file_id": file_id, "size": len(data)}
