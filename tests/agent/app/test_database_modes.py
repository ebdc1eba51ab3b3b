"""The two ways a deployment names its database (``tests.databases``), through the app.

``scripts/run`` with ``MONGODB_URI`` unset runs the embedded server, and the app is its
sole owner: what a killed process was handling is taken up at the next start at once.
With ``MONGODB_URI`` the app may share the database with another instance, so it takes
up only claims that have gone stale. The app tests run the first; these check that
they do, and that the second is what a user's URI gives.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.core import build_app
from agent.config import Settings
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from storage import collections as c
from storage.db import EMBEDDED_POOL
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.fixtures import fake
from tests.fakes.scripted import Request, ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.waiting import outbox_drained

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
OWNER = 4242


@pytest.fixture
def settings(app_db: AppDb, db: AsyncDatabase[Doc], tmp_path: Path) -> Settings:
    return make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=db.name,
        data_dir=tmp_path,
        openai_api_key="sk-test",
        owner_telegram_ids=[OWNER],
    )


def echo(req: Request) -> str:
    return "you said: " + str(req.messages[-1].parts[0].text)  # type: ignore[union-attr]


def channel(fake: FakeTelegram) -> TelegramChannel:
    return TelegramChannel(TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=0.01, cap=0.1))


@pytest.mark.every_database
async def test_the_app_runs_on_the_database_its_settings_name(
    fake: FakeTelegram, settings: Settings, app_db: AppDb
) -> None:
    fake.push_text(OWNER, "hello")
    async with build_app(
        settings, embedded=app_db.server, model=ScriptedModel(echo), channels=[channel(fake)]
    ) as app:
        await fake.wait_sent(1)
        database = app.database
        topology = database.client.topology_description.topology_type_name
        retries = database.client.options.retry_writes
        pool = database.client.options.pool_options.max_pool_size
        await outbox_drained(app.outbox)
    assert [s.visible for s in fake.sent] == ["you said: hello"]
    if app_db.mode == "embedded":  # as scripts/run: standalone, ours alone, no write retries
        assert database.embedded and database.owns_server
        assert (topology, retries) == ("Single", False)
        assert pool == EMBEDDED_POOL  # its commands take turns anyway (storage.db)
    else:  # as deploy/docker-compose.yml: a replica set, shared, retryable writes
        assert not database.embedded and not database.owns_server
        assert (topology, retries) == ("ReplicaSetWithPrimary", True)
        assert pool == 100  # pymongo's: a real server runs commands side by side


async def test_the_sole_owner_takes_up_at_once_what_a_killed_process_was_handling(
    fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], app_db: AppDb
) -> None:
    """Claimed a moment ago by a process killed mid-answer: with the embedded server no
    other process can be handling it, so the restart answers it without waiting for
    the claim to go stale (another instance on a shared MongoDB might still be)."""
    assert app_db.mode == "embedded"
    killed_at = datetime.now(UTC) - timedelta(seconds=1)
    await db[c.INBOX].insert_one(
        {
            "channel": "telegram", "external_id": "1:1", "chat_id": str(OWNER),
            "sender_id": str(OWNER), "sender_name": "", "text": "are you there?",
            "reply_to": None, "meta": {}, "received_at": killed_at,
            "conversation_key": f"telegram:{OWNER}", "status": "processing",
            "claimed_at": killed_at, "attempts": 1,
        }
    )  # fmt: skip
    async with build_app(
        settings, embedded=app_db.server, model=ScriptedModel(echo), channels=[channel(fake)]
    ) as app:
        await fake.wait_sent(1)
        await app.pipeline.join()
        await outbox_drained(app.outbox)
    assert [s.visible for s in fake.sent] == ["you said: are you there?"]
    row = await db[c.INBOX].find_one({"text": "are you there?"})
    assert row is not None and row["status"] == "done"
