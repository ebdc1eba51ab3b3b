"""The app's stop keeps to one deadline (``agent.app.shutdown``): a part whose stop hangs
is cut short and every part after it still stops; a message being handled when the
deadline passes stays unfinished, and the next start answers it once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import InvalidOperation

from agent.app.application import Feature, FeatureContext, Parts
from agent.app.core import build_app
from agent.app.shutdown import Shutdown
from agent.config import Settings
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from storage import collections as c
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.fixtures import fake
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.waiting import WATCHDOG, outbox_drained, until_async

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


def channel(fake: FakeTelegram) -> TelegramChannel:
    return TelegramChannel(TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=0.01, cap=0.1))


def noting_its_stop(order: list[str]) -> Feature:
    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield Parts()
        order.append("the part before it stopped")

    return feature


def stuck_in_its_stop(order: list[str], released: asyncio.Event) -> Feature:
    """A part whose stop waits for a database that does not answer, and swallows the
    first cancellation (as a dependency's ``wait_for`` can on Python 3.11)."""

    async def waiting_for_the_database(ctx: FeatureContext) -> AsyncIterator[Parts]:
        yield Parts()
        order.append("the stuck part began to stop")
        try:
            await released.wait()
        except asyncio.CancelledError:
            await released.wait()

    return waiting_for_the_database


async def test_a_stop_that_hangs_is_cut_short_and_the_parts_after_it_still_stop(
    fake: FakeTelegram, settings: Settings, app_db: AppDb
) -> None:
    order: list[str] = []
    released = asyncio.Event()
    shutdown = Shutdown(budget=0.5)
    features = [noting_its_stop(order), stuck_in_its_stop(order, released)]
    telegram = channel(fake)
    try:
        async with asyncio.timeout(WATCHDOG):  # a hang, not a slow machine
            async with build_app(
                settings,
                embedded=app_db.server,
                model=ScriptedModel(lambda r: "ok"),
                channels=[telegram],
                features=features,
                shutdown=shutdown,
            ) as app:
                client = app.database.client
    finally:
        released.set()
    assert order == ["the stuck part began to stop", "the part before it stopped"]
    [cut] = shutdown.cut
    assert cut.endswith("waiting_for_the_database")
    assert telegram.status()["connected"] is False  # the channel stopped after it
    with pytest.raises(InvalidOperation):  # and the database client was closed
        await client.watchkeeper.inbox.find_one({})


class HeldModel(ScriptedModel):
    """A model that does not answer until ``answer`` is set (a slow provider)."""

    def __init__(self) -> None:
        super().__init__(lambda r: "you said: " + str(r.messages[-1].parts[0].text))  # type: ignore[union-attr]
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        self.asked.set()
        await self.answer.wait()
        return await super().request(system, messages, tools)


@pytest.mark.every_database
async def test_a_message_cut_off_by_the_deadline_is_answered_once_at_the_next_start(
    fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], app_db: AppDb
) -> None:
    fake.push_text(OWNER, "what is on today?")
    model = HeldModel()
    async with asyncio.timeout(WATCHDOG):
        async with build_app(
            settings,
            embedded=app_db.server,
            model=model,
            channels=[channel(fake)],
            features=[],
            shutdown=Shutdown(budget=0.2),
        ):
            await model.asked.wait()  # being handled when the stop begins
    row = await db[c.INBOX].find_one({"text": "what is on today?"})
    assert row is not None and row["status"] == "processing"  # unfinished, not failed
    assert fake.sent == []

    # The next start (its claim stale by then, as after a crash) answers it, once.
    model.answer.set()
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

    async def done() -> bool:
        found = await db[c.INBOX].find_one({"text": "what is on today?"})
        return found is not None and found["status"] == "done"

    await until_async(done, "the message marked done")
    assert [s.visible for s in fake.sent] == ["you said: what is on today?"]
