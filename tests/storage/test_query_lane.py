"""The model's ``db_query`` has a lane of its own to the embedded server: the app's
commands share one connection (``storage.db.EMBEDDED_POOL``), and a query that takes
its full time limit must not hold them up."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pymongo.errors import OperationFailure

from storage.db import EMBEDDED_POOL, QUERY_APP_NAME, open_database
from tests.databases import AppDb


async def test_the_models_queries_reach_the_server_through_a_client_of_their_own(
    app_db: AppDb, tmp_path: Path
) -> None:
    name = f"lane_{uuid.uuid4().hex[:8]}"
    async with open_database(None, name, tmp_path, server=app_db.server) as database:
        assert database.client.options.pool_options.max_pool_size == EMBEDDED_POOL
        assert database.query_client is not None and database.queries.name == name
        # The server tells the two apart by the client's name: a find from the query
        # lane is refused, the app's own goes through.
        data = {"failCommands": ["find"], "errorCode": 2, "appName": QUERY_APP_NAME}
        admin = app_db.client.admin
        await admin.command({"configureFailPoint": "failCommand", "mode": "alwaysOn", "data": data})
        try:
            await database.db["notes"].insert_one({"x": 1})
            assert await database.db["notes"].find_one({}, {"_id": 0}) == {"x": 1}
            with pytest.raises(OperationFailure):
                await database.queries["notes"].find_one({})
        finally:
            await admin.command({"configureFailPoint": "failCommand", "mode": "off"})
        assert await database.queries["notes"].find_one({}, {"_id": 0}) == {"x": 1}
        await database.client.drop_database(name)
