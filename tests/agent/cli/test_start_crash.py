"""``watchkeeper run`` killed at start-up, between its first long poll and the database
answering: what that poll read was held unstored, so unacknowledged; the next start is
offered it again and answers it once.

A real process against the fake Bot API and the fake OpenAI model; its database is the
test's server behind a relay that holds connections until told (a database that
answers late), so the kill lands while the update waits at the gate (``agent.app.gate``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from tests.agent.cli.procs import free_port, run_env, start
from tests.agent.cli.procs import until_while_running as until
from tests.fakes.fixtures import fake
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.fakes.unheard_close import UnheardCloseRelay
from tests.waiting import until_async

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
OWNER = 4242


async def _finished(db: AsyncDatabase[Doc]) -> bool:
    done = await db[c.INBOX].count_documents({"status": "done"})
    unsent = await db[c.OUTBOX].count_documents({"status": {"$in": ["pending", "sending"]}})
    return done == 1 and unsent == 0


async def test_killed_while_the_first_poll_waits_for_the_database(
    fake: FakeTelegram, mongo_server: str, db: AsyncDatabase[Doc], tmp_path: Path
) -> None:
    update = fake.push_text(OWNER, "are you there?")
    database_answers = asyncio.Event()
    async with (
        FakeOpenAI() as model,
        UnheardCloseRelay(mongo_server, opened=database_answers) as relay,
    ):
        model.default = Answer(200, model.completion("I am here."), 0.0)
        env = run_env(
            tmp_path,
            free_port(),
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=fake.url,
            OPENAI_BASE_URL=model.base_url,
            OWNER_TELEGRAM_IDS=str(OWNER),
            MONGODB_URI=relay.uri + "?directConnection=true",
            MONGODB_DB=db.name,
            NO_PROXY="127.0.0.1,localhost",
        )

        first = start(env, tmp_path)
        try:
            # The first long poll's answer, the update, is in the process's hands; the
            # database does not answer yet, so it waits at the gate, unstored.
            taken = update["update_id"]
            await until(lambda: taken in fake.handed_out, 30, "the update handed out", first)
            first.kill()  # SIGKILL: no clean-up, no last confirming poll
            await asyncio.to_thread(first.wait, 10)
        finally:
            if first.poll() is None:
                first.kill()
        assert update["update_id"] not in fake.confirmed
        assert fake.sent == [] and model.requests == []
        assert await db[c.INBOX].count_documents({}) == 0

        database_answers.set()
        second = start(env, tmp_path)
        try:
            await until(lambda: fake.sent, 60, "answer", second)
            await until(lambda: update["update_id"] in fake.confirmed, 30, "confirmation", second)
            # Handled to the end: a second answer would have been sent before this.
            await until_async(lambda: _finished(db), "the update marked done")
        finally:
            second.terminate()
            await asyncio.to_thread(second.wait, 30)
    assert [s.visible for s in fake.sent] == ["I am here."]
    assert len(model.requests) == 1
    rows = await db[c.INBOX].find({}).to_list()
    assert [(r["text"], r["status"]) for r in rows] == [("are you there?", "done")]
