"""Inbound media files in GridFS (bucket ``media``), and what fetching them set on
their inbox row (``channels.delivery.media`` fetches; ``agent.conversation.media_turn``
reads and transcribes).

``MediaStore`` keeps each file once, wherever the database lives, under the key the
fetcher chooses (``<channel>:<external id>:<index>``); a unique index on that key
makes ``put`` idempotent, also when two attempts race: the loser's chunks are removed
and the winner's id is returned. ``gridfs`` is imported when a file is first stored or
read: most processes never see a photo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bson import ObjectId
from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.records import Doc

if TYPE_CHECKING:
    from gridfs import AsyncGridFSBucket

BUCKET = "media"
KEY_FIELD = "metadata.key"
"""Where a stored file's key is: GridFS keeps the caller's fields under ``metadata``."""


class MediaStore:
    """Files stored once in GridFS, each under its key, and the inbox rows' media fields."""

    def __init__(self, db: AsyncDatabase[Doc]) -> None:
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

    async def settle(self, inbox_id: ObjectId, index: int, fetched: Mapping[str, Any]) -> None:
        """Set what fetching the row's item ``index`` found (``status``, ``note``,
        ``file_id``, ``size``) and drop how to fetch it, unless it was settled already."""
        sets = {f"media.{index}.{k}": v for k, v in fetched.items()}
        await self._db[c.INBOX].update_one(
            {"_id": inbox_id, f"media.{index}.status": "pending"},
            {"$set": sets, "$unset": {f"media.{index}.source": ""}},
        )
