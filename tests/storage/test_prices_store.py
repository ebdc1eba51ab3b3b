"""The owner's model prices read once into ``Price``s at their store: a bad entry is
skipped (the rest still apply), and what is written reads back the same."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.repos.prices import PRICES_ID, Price, put_price, read_prices, write_prices

Doc = dict[str, Any]


async def test_prices_read_back_as_written_and_a_bad_entry_is_skipped(
    db: AsyncDatabase[Doc],
) -> None:
    assert await read_prices(db) is None
    await write_prices(db, {"my-model": Price(1.0, 2.0, 0.5)}, default=Price(3.0, 4.0))
    await put_price(db, "other", Price(0.1, 0.2))
    bad = {"model": "typo", "input": "cheap", "output": 1}
    await db[c.SETTINGS].update_one({"_id": PRICES_ID}, {"$push": {"models": bad}})

    stored = await read_prices(db)
    assert stored is not None
    assert dict(stored.models) == {"my-model": Price(1.0, 2.0, 0.5), "other": Price(0.1, 0.2)}
    assert stored.default == Price(3.0, 4.0)
