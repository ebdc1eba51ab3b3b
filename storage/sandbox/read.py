"""Reading a ``db_query`` answer within fixed memory: stop at the size cap, not after it.

Results used to be fetched whole and cut afterwards, so 200 rows of 8 MB took the agent
to 1.7 GB for an answer of 16,000 characters. Here the cursor is read in small batches
of raw BSON (servers cap one batch at 16 MB), each document's size is known before it
is decoded, and reading stops as soon as the answer is full:

1. a row over ``MAX_ROW_BYTES`` is never decoded; the answer stops before it and says
   so, naming the cap (an error when it is the first row);
2. rows are added while their JSON fits ``MAX_CHARS`` (whole rows only);
3. past that, rows are only counted, for at most ``MAX_COUNT_BYTES`` more, so the note
   can say how many there were; then the cursor is closed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from bson import decode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.command_cursor import AsyncCommandCursor
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.asynchronous.database import AsyncDatabase

from storage.ejson import to_ejson
from storage.sandbox.rules import SandboxError

Doc = dict[str, Any]
Raw = RawBSONDocument

MAX_CHARS = 16_000
NOTE_RESERVE = 600
"""Characters kept free for the result's keys and notes within ``MAX_CHARS``."""
MAX_ROW_BYTES = 64 * 1024
"""Largest document (BSON bytes) one row of an answer may be; the answer shows 16,000
characters, so a larger row could never be shown."""
MAX_COUNT_BYTES = 4 * 1024 * 1024
BATCH_SIZE = 50


def raw_collection(db: AsyncDatabase[Doc], name: str) -> AsyncCollection[Raw]:
    """``name`` answering raw BSON, so sizes are known before anything is decoded."""
    options: CodecOptions[Raw] = db.codec_options.with_options(document_class=RawBSONDocument)
    return cast("AsyncCollection[Raw]", db.get_collection(name, codec_options=options))


@dataclass
class Reading:
    """What one cursor gave: the rows that fit, and why reading stopped adding rows."""

    rows: list[Any] = field(default_factory=list)
    seen: int = 0
    complete: bool = True
    """Every row was seen (so ``seen`` is the total)."""
    cut: bool = False
    oversized: tuple[int, int] | None = None
    """``(index, bytes)`` of the first row over ``MAX_ROW_BYTES``."""
    capped: bool = False
    """More rows than ``max_rows`` came back."""


async def read(
    cursor: AsyncCursor[Raw] | AsyncCommandCursor[Raw],
    codec: CodecOptions[Doc],
    max_rows: int,
) -> Reading:
    """Read ``cursor`` into Extended JSON rows within the caps of the module docstring."""
    out = Reading()
    used, budget, scanned = len("[]"), MAX_CHARS - NOTE_RESERVE, 0
    stopped = False
    try:
        async for raw in cursor:
            size = len(raw.raw)
            out.seen += 1
            if not stopped:
                stopped = _add(out, raw, size, codec, max_rows, budget - used)
                if not stopped:
                    used += len(json.dumps(out.rows[-1], ensure_ascii=False)) + len(", ")
                    continue
            scanned += size
            if scanned > MAX_COUNT_BYTES:
                out.complete = False
                break
    finally:
        await cursor.close()
    return out


def _add(out: Reading, raw: Raw, size: int, codec: CodecOptions[Doc], max_rows: int,
         room: int) -> bool:  # fmt: skip
    """Add ``raw`` as a row; True when it did not fit (and why is recorded in ``out``)."""
    if len(out.rows) >= max_rows:
        out.capped = True
        return True
    if size > MAX_ROW_BYTES:
        out.oversized = (len(out.rows), size)
        return True
    row = to_ejson(decode(raw.raw, codec_options=codec))
    if len(json.dumps(row, ensure_ascii=False)) + len(", ") > room:
        out.cut = True
        return True
    out.rows.append(row)
    return False


def answer(reading: Reading, page: Callable[[int], str]) -> Doc:
    """``{"rows": [...]}`` with a note when rows were left out; ``page(n)`` says how to
    start at row ``n`` (``skip=n`` for find, a ``$skip`` stage for aggregate)."""
    kept = len(reading.rows)
    if reading.oversized is not None:
        index, size = reading.oversized
        message = (
            f"row {index + 1} is {size:,} bytes, over the limit of {MAX_ROW_BYTES:,} bytes for "
            "one row; use a projection to return fewer or shorter fields"
        )
        message += f", or {page(index + 1)} to pass it"
        if not kept:
            raise SandboxError(message)
        return {"rows": reading.rows, "note": f"returned {kept} rows; {message}"}
    result: Doc = {"rows": reading.rows}
    if reading.cut:
        total = f"{reading.seen}" if reading.complete else f"more than {reading.seen}"
        result["note"] = (
            f"answer cut at about {MAX_CHARS} characters: returned {kept} of {total} rows; use "
            f"a projection or a smaller limit, or {page(kept)} for the rest"
        )
    return result


def fit_names(names: list[str]) -> Doc:
    """``{"collections": [...]}`` within ``MAX_CHARS``, with a note when names were left out."""
    shown: list[str] = []
    used = len("[]")
    for name in names:
        used += len(json.dumps(name, ensure_ascii=False)) + len(", ")
        if used > MAX_CHARS - NOTE_RESERVE:
            break
        shown.append(name)
    result: Doc = {"collections": shown}
    if len(shown) < len(names):
        result["note"] = (
            f"{len(names)} collections; showing the first {len(shown)} in name order "
            "(read others by name with find)"
        )
    return result


def fit_json(value: Any, what: str) -> tuple[Any, str | None]:
    """``value`` as is when its JSON fits the answer, else ``None`` with a note."""
    if len(json.dumps(value, ensure_ascii=False)) <= MAX_CHARS - NOTE_RESERVE:
        return value, None
    return None, f"{what} left out: too long to show"
