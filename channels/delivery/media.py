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

``storage.repos.media_files.MediaStore`` keeps each file once in GridFS, under the
key the fetcher chooses, and writes what fetching found into the inbox row.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from bson import ObjectId

from channels.types import Channel, MediaItem, MediaRefused, MediaSource, MediaTooLarge
from storage.repos.inbox import InboxRow, MediaEntry
from storage.repos.media_files import MediaStore

log = logging.getLogger(__name__)
FETCH_TIMEOUT = 180.0
"""Seconds one download may take (a stuck transport must not hold the exchange)."""


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


class MediaFetcher:
    """Downloads and stores the pending media of a message the agent is about to read."""

    def __init__(
        self, store: MediaStore, channels: Mapping[str, Channel], caps: MediaCaps = MediaCaps()
    ) -> None:
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
        await self._store.settle(row.id, index, result)
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
