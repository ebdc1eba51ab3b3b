"""How long a value a ``db_query`` write may leave behind (issue 28).

Seven accepted updates, each doubling one string through an alias (``{"$set": {"t":
"$s"}}`` then ``{"$concat": ["$s", "$t"]}``, growth 2 per request), took it to 256,000
characters; ``sandbox_growth`` bounds one request, not a series. Two rules:

1. every string written out in a write's ``data``, ``update`` or output pipeline is at
   most ``MAX_STRING_CHARS`` characters (pure);
2. a write that builds values from stored ones (an update pipeline, or an aggregate
   ending in ``$out``/``$merge``, using ``BUILDERS``) is first run as a read with the
   same stages, and refused, with nothing written, when a document it would leave is
   over ``MAX_BUILT_BYTES``: the largest row ``db_query`` can read back. For
   ``updateOne`` every matching document is tried, not only the one it would change.
   What cannot be tried that way may not build values: an upsert (it inserts what the
   filter and the pipeline make) and a ``$merge`` ``whenMatched`` pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.ejson import to_ejson
from storage.sandbox_growth import BUILDERS
from storage.sandbox_growth_parts import contains
from storage.sandbox_read import MAX_ROW_BYTES
from storage.sandbox_rules import SandboxError

Doc = dict[str, Any]

MAX_STRING_CHARS = 16_000
"""A string longer than one ``db_query`` answer could never be read back whole."""
MAX_BUILT_BYTES = MAX_ROW_BYTES
BUILDING = BUILDERS | {"$replaceAll", "$replaceOne"}
"""Operators whose result can be longer than what they read."""
SIZE = "_db_query_size"


def check_written_strings(value: Any, where: str) -> None:
    """Refuse a string over ``MAX_STRING_CHARS`` anywhere in ``value`` (a write's argument)."""
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, str) and len(node) > MAX_STRING_CHARS:
            raise SandboxError(
                f"{where}: a string of {len(node):,} characters; db_query stores strings of "
                f"at most {MAX_STRING_CHARS:,} characters (split the text over several "
                "fields or documents)"
            )
        if isinstance(node, Mapping):
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def builds(stages: Any) -> bool:
    """``stages`` can make a value longer than what it reads (see ``BUILDING``)."""
    return contains(stages, frozenset(BUILDING))


def check_untried_building(update: Any, upsert: bool, pipeline: Any) -> None:
    """Refuse the building writes that cannot be tried first (rule 2)."""
    if upsert and isinstance(update, list) and builds(update):
        raise SandboxError(
            "update: an upsert cannot build values with $concat and the like (what it would "
            "insert cannot be checked first); insert the document, then update it"
        )
    last = pipeline[-1] if isinstance(pipeline, list) and pipeline else None
    merge = last.get("$merge") if isinstance(last, Mapping) else None
    if isinstance(merge, Mapping) and builds(merge.get("whenMatched")):
        raise SandboxError(
            "pipeline: a $merge whenMatched pipeline may not build values with $concat and "
            "the like; compute them in the stages before $merge"
        )


async def check_built_sizes(
    db: AsyncDatabase[Doc], collection: str, stages: list[Doc], what: str, comment: str
) -> None:
    """Run ``stages`` as a read and refuse when a document they make is over
    ``MAX_BUILT_BYTES`` (rule 2); ``what`` names the write in the message."""
    probe = [
        *stages,
        {"$project": {SIZE: {"$bsonSize": "$$ROOT"}}},
        {"$match": {SIZE: {"$gt": MAX_BUILT_BYTES}}},
        {"$limit": 1},
    ]
    cursor = await db[collection].aggregate(probe, comment=comment)
    found = await cursor.to_list(1)
    if found:
        shown = str(to_ejson(found[0].get("_id")))[:60]
        raise SandboxError(
            f"{what} would leave a document of {found[0][SIZE]:,} bytes (_id {shown}); a "
            f"write that builds values ($concat and the like) may leave documents of at most "
            f"{MAX_BUILT_BYTES:,} bytes, the largest row db_query can read back; nothing "
            "was written: keep long text in several documents"
        )
