"""Seeding inbox rows with stored media (as ``channels.delivery.media`` leaves them) for tests."""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bson import ObjectId
from PIL import Image

from agent.context import AgentDeps
from storage import collections as c
from storage.repos.media_files import MediaStore

OGG = b"OggS\x00\x02fake-opus-voice-note"


def phone_photo(size: tuple[int, int] = (4000, 3000)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (40, 120, 200)).save(out, format="JPEG", quality=90)
    return out.getvalue()


@dataclass(frozen=True)
class Media:
    kind: str
    mime: str
    data: bytes
    duration_s: int | None = None
    transcript: str | None = None


PHOTO = Media("image", "image/jpeg", b"")  # bytes made on use: phone_photo()
VOICE = Media("audio", "audio/ogg; codecs=opus", OGG, duration_s=42)


async def seed_inbox(
    deps: AgentDeps,
    *media: Media,
    text: str = "",
    burst_ids: list[ObjectId] | None = None,
    inbox_id: ObjectId | None = None,
) -> ObjectId:
    """An inbox row whose media are stored in GridFS, as the channels leave it."""
    inbox_id = inbox_id or ObjectId()
    store = MediaStore(deps.db)
    items: list[dict[str, Any]] = []
    for index, item in enumerate(media):
        data = item.data or phone_photo()
        file_id = await store.put(data, key=f"test:{inbox_id}:{index}", mime=item.mime,
                                  kind=item.kind)  # fmt: skip
        doc: dict[str, Any] = {"kind": item.kind, "mime": item.mime, "size": len(data),
                               "duration_s": item.duration_s, "status": "stored",
                               "file_id": file_id}  # fmt: skip
        if item.transcript is not None:
            doc["transcript"] = item.transcript
        items.append(doc)
    row: dict[str, Any] = {
        "_id": inbox_id,
        "channel": "telegram",
        "external_id": str(inbox_id),
        "chat_id": "42",
        "sender_id": "42",
        "text": text,
        "received_at": datetime.now(UTC),
        "status": "processing",
        "media": items,
    }
    if burst_ids:
        row["burst_ids"] = burst_ids
    await deps.db[c.INBOX].insert_one(row)
    return inbox_id


async def stored_user_docs(deps: AgentDeps) -> list[dict[str, Any]]:
    return [d async for d in deps.db[c.MESSAGES].find({"role": "user"}).sort("seq", 1)]
