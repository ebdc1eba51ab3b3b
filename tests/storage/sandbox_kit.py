"""Shared by the ``db_query`` sandbox tests: run one operation as the model would send it."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from storage.sandbox import DbOperation, SandboxError
from storage.sandbox.execute import run_db_query

Db = AsyncDatabase[dict[str, Any]]


async def q(db: Db, operation: str, collection: str = "", **args: Any) -> dict[str, Any]:
    """Run one db_query operation as the model would send it."""
    args |= {"operation": operation, "collection": collection}
    return await run_db_query(db, DbOperation.model_validate(args))


async def refused(db: Db, match: str, operation: str, collection: str = "", **args: Any) -> str:
    """Assert the sandbox refuses the operation with a message matching ``match``."""
    with pytest.raises(SandboxError, match=match) as info:
        await q(db, operation, collection, **args)
    return str(info.value)


async def seed(db: Db, name: str, count: int, **extra: Any) -> None:
    await db[name].insert_many([{"n": i, **extra} for i in range(count)])
