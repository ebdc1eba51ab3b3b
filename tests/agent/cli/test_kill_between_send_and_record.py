"""``watchkeeper run`` killed between Telegram accepting a reply and the reply's record.

Telegram gives no way to ask whether a message arrived, so a reply whose record a
``kill -9`` cut off is sent again after the restart: seen twice, never lost (the
README's "Nothing lost, nothing doubled"). That window is the reply's own write: no
other reply's record waits for it, so a reply sent meanwhile is recorded, and a
restart does not send it again.

A real process against the fake Bot API and the fake OpenAI model; its database is the
test's server behind a relay that holds back the first reply's record for good (a
write still on its way when the process dies), so the kill lands exactly there.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.pipeline import STALE_CLAIM
from storage import collections as c
from tests.agent.cli.procs import free_port, run_env, start
from tests.agent.cli.procs import until_while_running as until
from tests.fakes.fixtures import fake
from tests.fakes.held_write import HeldWriteRelay
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.waiting import until_async

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
FIRST, SECOND = 4301, 4302
HELD = "The boiler pressure is 1.4 bar, in range."
OTHER = "The garden lights are off."


def _held_record(message: bytes) -> bool:
    """The outbox insert that records the first reply (not its copy in the conversation)."""
    return b"outbox\x00" in message and HELD.encode() in message


async def test_a_kill_between_send_and_record_resends_only_that_reply(
    fake: FakeTelegram, mongo_server: str, db: AsyncDatabase[Doc], tmp_path: Path
) -> None:
    async with FakeOpenAI() as model, HeldWriteRelay(mongo_server, _held_record) as relay:
        env = run_env(
            tmp_path,
            free_port(),
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=fake.url,
            OPENAI_BASE_URL=model.base_url,
            OWNER_TELEGRAM_IDS=f"{FIRST},{SECOND}",
            MONGODB_URI=relay.uri + "?directConnection=true",
            MONGODB_DB=db.name,
            NO_PROXY="127.0.0.1,localhost",
        )
        first = start(env, tmp_path)
        try:
            model.reply_text(HELD)
            fake.push_text(FIRST, "what is the boiler pressure?")
            # Telegram accepted the reply; its record is on its way, and stays there.
            await until(relay.held.is_set, 60, "the first reply's record", first)
            assert [s.visible for s in fake.sent] == [HELD]

            model.reply_text(OTHER)
            fake.push_text(SECOND, "are the garden lights off?")

            async def other_recorded() -> bool:
                row = await db[c.OUTBOX].find_one({"chat_id": str(SECOND), "status": "sent"})
                return row is not None

            # Its own write: it does not wait for the held one.
            await until_async(other_recorded, "the second reply recorded as sent")
            first.kill()  # SIGKILL: the held record never reaches the database
            await asyncio.to_thread(first.wait, 10)
        finally:
            if first.poll() is None:
                first.kill()
        assert await db[c.OUTBOX].count_documents({"chat_id": str(FIRST)}) == 0
        # A database of its own (not the embedded one): another instance could still be
        # at work, so a claim is taken over once stale. Aged here instead of waited for.
        stale = datetime.now(UTC) - STALE_CLAIM - timedelta(minutes=1)
        await db[c.INBOX].update_many({"status": "processing"}, {"$set": {"claimed_at": stale}})

        second = start(env, tmp_path)
        try:

            async def finished() -> bool:
                done = await db[c.INBOX].count_documents({"status": "done"})
                sent = await db[c.OUTBOX].count_documents({"status": "sent"})
                return done == 2 and sent == 2

            await until(lambda: len(fake.sent) >= 3, 60, "the first reply sent again", second)
            await until_async(finished, "both messages handled and their replies recorded")
        finally:
            second.terminate()
            await asyncio.to_thread(second.wait, 30)
    # The reply the kill cut off from its record is sent again (the stored answer: no
    # second model call); the one recorded before the kill is not.
    assert Counter(s.visible for s in fake.sent) == {HELD: 2, OTHER: 1}
    assert len(model.requests) == 2
