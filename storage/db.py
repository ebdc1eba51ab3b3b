"""Opening the database: the configured MongoDB, or the embedded server."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from storage.embedded import EmbeddedServer
from storage.indexes import ensure_indexes

log = logging.getLogger(__name__)

Doc = dict[str, Any]


@dataclass
class Database:
    client: AsyncMongoClient[Doc]
    db: AsyncDatabase[Doc]
    embedded: bool
    owns_server: bool = False
    """True when this process started the embedded server and so is its only writer
    apart from commands that attach to it briefly."""

    async def ping(self) -> bool:
        try:
            await self.client.admin.command("ping")
        except Exception:
            return False
        return True


def make_client(uri: str, *, embedded: bool = False) -> AsyncMongoClient[Doc]:
    kwargs: dict[str, Any] = {"serverSelectionTimeoutMS": 5000, "tz_aware": True}
    if embedded:
        # SecantusDB keeps a record per retryable write and sorts it on every write once
        # it is full, which slows writes ~15x after 10,000 of them. Our writes are made
        # idempotent by unique keys instead (inbox, outbox, leases).
        kwargs.update(directConnection=True, retryWrites=False)
    return AsyncMongoClient(uri, **kwargs)


@contextlib.asynccontextmanager
async def open_database(uri: str | None, db_name: str, data_dir: Path) -> AsyncIterator[Database]:
    """Yield a connected database with indexes; stop what was started, in reverse."""
    embedded: EmbeddedServer | None = None
    if uri is None:
        embedded = EmbeddedServer(data_dir)
        uri = await embedded.start()
    try:
        client = make_client(uri, embedded=embedded is not None)
        try:
            database = Database(
                client=client,
                db=client[db_name],
                embedded=embedded is not None,
                owns_server=embedded is not None and embedded.owner,
            )
            await ensure_indexes(database.db)
            yield database
        finally:
            await client.close()
    finally:
        if embedded is not None:
            await embedded.stop()
