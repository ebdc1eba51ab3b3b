"""Results of tool calls that act on the world, kept per exchange and call index.

An exchange that is replayed after a crash (the model called ``send_message`` or
wrote to the database, then the process died before the answer was stored) calls the
model again; when it makes the same call at the same position, the stored result is
returned instead of acting a second time. A different call at that position is a
different action and runs.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage import retry

Doc = dict[str, Any]


def call_digest(name: str, arguments: object) -> str:
    text = name + ":" + json.dumps(arguments, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


class EffectLog:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self._coll = db[c.TOOL_EFFECTS]

    async def recall(self, exchange: str, index: int, digest: str) -> Doc | None:
        """The result stored for this call, when the same call was made here before."""
        doc = await self._coll.find_one({"_id": f"{exchange}:{index}"})
        if doc is None or doc.get("digest") != digest:
            return None
        result: Doc = json.loads(doc["result"])
        return result

    async def record(
        self, exchange: str, index: int, name: str, digest: str, result: Doc, now: datetime
    ) -> None:
        # Stored as the JSON the model saw (any value, any key), under an upsert on the
        # (exchange, index) key: writing it twice changes nothing.
        text = json.dumps(result, ensure_ascii=False, default=str)
        await retry.retried(
            lambda: self._coll.update_one(
                {"_id": f"{exchange}:{index}"},
                {"$set": {"tool": name, "digest": digest, "result": text, "created_at": now}},
                upsert=True,
            ),
            "record a tool effect",
        )
