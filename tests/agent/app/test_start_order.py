"""Start-up order: the channels poll before the database is open and before the agent
is built (``agent.app.core``).

The whole app against the fake Bot API: an update read before the database answers
is acknowledged only once stored; one that arrives while the app starts is stored and
acknowledged before the agent exists, and answered exactly once when it does; what a
dead process left unfinished comes before it; a start-up that fails leaves it
unfinished for the next start, never failed or answered twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.application import Feature, FeatureContext, Parts
from agent.app.core import build_app
from agent.config import Settings
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from storage import collections as c
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.fixtures import fake
from tests.fakes.scripted import Request, ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.fakes.unheard_close import UnheardCloseRelay
from tests.waiting import WATCHDOG, outbox_drained, until, waiting_in

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


async def stored(db: AsyncDatabase[Doc], text: str, within: float = WATCHDOG) -> Doc:
    """The inbox row of ``text``, once it is there."""
    deadline = asyncio.get_running_loop().time() + within
    while (row := await db[c.INBOX].find_one({"text": text})) is None:
        assert asyncio.get_running_loop().time() < deadline, f"{text!r} never stored"
        await asyncio.sleep(0.01)
    return row


def holding_until_stored(
    db: AsyncDatabase[Doc], fake: FakeTelegram, update: Doc, seen: list[str]
) -> Feature:
    """A feature (so: the app half-built) that waits until ``update`` is stored and
    acknowledged and waits in the intake's queue for the pipeline, and notes what was
    answered."""

    async def hold(ctx: FeatureContext) -> AsyncIterator[Parts]:
        row = await stored(db, update["message"]["text"])
        await fake.wait_confirmed(update["update_id"])
        await until(lambda: ctx.intake.updates.qsize() > 0, "the handling held")
        seen.append(row["status"])
        seen.extend(sent.visible for sent in fake.sent)
        yield Parts()

    return hold


@pytest.mark.every_database
async def test_an_update_arriving_during_start_up_is_stored_then_answered_once(
    fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], app_db: AppDb
) -> None:
    update = fake.push_text(OWNER, "hello while you start")
    model = ScriptedModel(echo)
    seen: list[str] = []
    hold = holding_until_stored(db, fake, update, seen)
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[channel(fake)], features=[hold]
    ) as app:
        # Stored and acknowledged while the app started; answered only once every
        # feature was in place (their commands and interceptors apply to it).
        assert seen == ["processing"]
        [reply] = await fake.wait_sent(1)
        await app.pipeline.join()
        await outbox_drained(app.outbox)  # a second answer would have been sent by now
        assert [s.visible for s in fake.sent] == ["you said: hello while you start"]
        assert reply.chat_id == str(OWNER)
        assert len(model.requests) == 1
        rows = await db[c.INBOX].find({}).to_list()
        assert [(r["text"], r["status"], r["attempts"]) for r in rows] == [
            ("hello while you start", "done", 1)
        ]


async def test_the_first_long_poll_goes_out_before_the_database_answers(
    fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], app_db: AppDb
) -> None:
    """The database answers late: the channel polls meanwhile, holds what it read
    unacknowledged (a crash now loses nothing: Telegram offers it again), then stores,
    acknowledges and answers it once."""
    update = fake.push_text(OWNER, "hello before the database")
    model = ScriptedModel(echo)
    database_answers = asyncio.Event()
    async with UnheardCloseRelay(app_db.uri, opened=database_answers) as relay:
        late = settings.model_copy(update={"mongodb_uri": relay.uri + "?directConnection=true"})

        async def run() -> None:
            async with build_app(late, model=model, channels=[channel(fake)], features=[]) as app:
                await fake.wait_sent(1)
                await app.pipeline.join()

        running = asyncio.create_task(run())
        try:
            await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) == 1)
            await until(lambda: waiting_in("SinkGate._after_open"), "the update held at the sink")
            assert update["update_id"] not in fake.confirmed
            assert len(fake.calls_to("getUpdates")) == 1  # a second poll would confirm it
            assert await db[c.INBOX].count_documents({}) == 0
            database_answers.set()
            await asyncio.wait_for(running, 15)
        finally:
            database_answers.set()
            await asyncio.wait_for(running, 15)
    assert update["update_id"] in fake.confirmed
    assert [s.visible for s in fake.sent] == ["you said: hello before the database"]
    assert len(model.requests) == 1
    rows = await db[c.INBOX].find({}).to_list()
    assert [(r["text"], r["status"]) for r in rows] == [("hello before the database", "done")]


class WarmingModel(ScriptedModel):
    """A scripted model with an SDK to load, as the OpenAI adapter has (``warm``)."""

    def __init__(self) -> None:
        super().__init__(echo)
        self.warmed = asyncio.Event()

    async def warm(self) -> None:
        self.warmed.set()


async def test_a_message_read_while_the_database_opens_starts_the_model_loading(
    fake: FakeTelegram, settings: Settings, app_db: AppDb
) -> None:
    """The model's SDK (a second of imports) loads while the database opens, from the
    first message read, so a message waiting at start is not answered a second later
    than the rest of start-up allows. With no message, nothing loads (idle memory)."""
    model = WarmingModel()
    database_answers = asyncio.Event()
    async with UnheardCloseRelay(app_db.uri, opened=database_answers) as relay:
        late = settings.model_copy(update={"mongodb_uri": relay.uri + "?directConnection=true"})

        async def run() -> None:
            async with build_app(late, model=model, channels=[channel(fake)], features=[]):
                await fake.wait_sent(1)

        running = asyncio.create_task(run())
        try:
            await fake.wait_for(lambda: len(fake.calls_to("getUpdates")) == 1)
            assert not model.warmed.is_set()  # nothing read yet: nothing loaded
            fake.push_text(OWNER, "hello while the database opens")
            await until(lambda: waiting_in("SinkGate._after_open"), "the update held at the sink")
            await asyncio.wait_for(model.warmed.wait(), WATCHDOG)
            assert len(model.requests) == 0  # loading, not answering: nothing is stored yet
        finally:
            database_answers.set()
            await asyncio.wait_for(running, 15)
    assert [s.visible for s in fake.sent] == ["you said: hello while the database opens"]


@pytest.mark.every_database
async def test_what_a_dead_process_left_is_answered_before_what_arrives_at_start(
    fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], app_db: AppDb
) -> None:
    left = datetime.now(UTC) - timedelta(hours=1)
    await db[c.INBOX].insert_one(
        {
            "channel": "telegram", "external_id": "1:1", "chat_id": str(OWNER),
            "sender_id": str(OWNER), "sender_name": "", "text": "left unfinished",
            "reply_to": None, "meta": {}, "received_at": left,
            "conversation_key": f"telegram:{OWNER}", "status": "processing",
            "claimed_at": left, "attempts": 1,
        }
    )  # fmt: skip
    update = fake.push_text(OWNER, "new at start")
    model = ScriptedModel(echo)
    hold = holding_until_stored(db, fake, update, [])
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[channel(fake)], features=[hold]
    ) as app:
        await fake.wait_sent(2)
        await app.pipeline.join()
        await outbox_drained(app.outbox)
    assert [s.visible for s in fake.sent] == ["you said: left unfinished", "you said: new at start"]
    assert len(model.requests) == 2


async def test_a_failed_start_leaves_a_stored_update_for_the_next_start(
    fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], app_db: AppDb
) -> None:
    update = fake.push_text(OWNER, "hello before a crash")
    model = ScriptedModel(echo)
    seen: list[str] = []
    hold = holding_until_stored(db, fake, update, seen)

    async def broken(ctx: FeatureContext) -> AsyncIterator[Parts]:
        raise RuntimeError("a feature failed to start")
        yield Parts()  # (a generator, as every feature)

    with pytest.raises(RuntimeError, match="a feature failed to start"):
        async with asyncio.timeout(30):  # watchdog: nothing waits for the gate to open
            async with build_app(
                settings,
                embedded=app_db.server,
                model=model,
                channels=[channel(fake)],
                features=[hold, broken],
            ):
                pass
    assert seen == ["processing"]
    row = await stored(db, "hello before a crash")
    assert row["status"] == "processing"  # unfinished, not failed: resumed next time
    assert fake.sent == [] and model.requests == []

    # The next start (its claim now stale, as after a crash) answers it, once.
    later = FakeClock(datetime.now(UTC) + timedelta(hours=1))
    async with build_app(
        settings,
        embedded=app_db.server,
        model=model,
        channels=[channel(fake)],
        features=[],
        clock=later,
    ) as app:
        await fake.wait_sent(1)
        await app.pipeline.join()
        await outbox_drained(app.outbox)
    assert [s.visible for s in fake.sent] == ["you said: hello before a crash"]
    assert len(model.requests) == 1
    row = await stored(db, "hello before a crash")
    assert row["status"] == "done"


async def test_a_refused_token_stops_start_up_and_the_database_with_it(
    fake: FakeTelegram, settings: Settings, app_db: AppDb
) -> None:
    """The database opens while the channel sets up: a refused token stops both, and
    nothing of either is left running."""
    fake.fail("getMe", 401, "Unauthorized")
    before = asyncio.all_tasks()
    with pytest.raises(RuntimeError, match="rejected the bot token"):
        async with build_app(
            settings,
            embedded=app_db.server,
            model=ScriptedModel(echo),
            channels=[channel(fake)],
            features=[],
        ):
            raise AssertionError("started with a refused token")
    await until(lambda: all(t.done() for t in asyncio.all_tasks() - before), "all stopped")
    assert fake.calls_to("getUpdates") == []
