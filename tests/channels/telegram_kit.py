"""Shared by the Telegram tests: the real channel against a fake Bot API, with the real
pipeline, outbox, dispatcher and agent (scripted model) on a real database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.registry import reach
from agent.context import AgentDeps
from agent.conversation.agent import Agent
from agent.conversation.dispatch import Dispatcher
from agent.llm.base import ModelClient
from agent.owner import OwnerSettings
from agent.reach import Owners
from agent.tools.catalog import ToolCatalog
from channels.delivery.outbox import Outbox
from channels.delivery.pipeline import Pipeline
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from runtime.clock import utcnow
from storage.repos.outbox_row import OutboxRow
from tests.conftest import make_settings
from tests.fakes.fixtures import fake
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.waiting import outbox_drained

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
OWNER = 4242
STRANGER = 777
HOOK_URL = "https://bot.example.invalid/webhooks/telegram"
SECRET = "s3cret-Token_1"


def _catalog() -> ToolCatalog:
    try:
        from agent.tools.catalog import core_catalog

        return core_catalog()
    except ImportError:  # agent.tools.db is not written yet
        return ToolCatalog()


@dataclass
class Stack:
    fake: FakeTelegram
    channel: TelegramChannel
    pipeline: Pipeline
    outbox: Outbox
    failures: list[OutboxRow] = field(default_factory=list)

    async def stop(self) -> None:
        await self.channel.stop()
        await self.pipeline.stop(grace=0)  # abrupt: a crash leaves work unfinished
        await self.outbox.stop()


Build = Callable[..., Any]


@pytest.fixture
async def build(
    db: AsyncDatabase[Doc], fake: FakeTelegram, http: aiohttp.ClientSession
) -> AsyncIterator[Build]:
    stacks: list[Stack] = []

    async def make(
        model: ModelClient,
        *,
        clock: Callable[[], datetime] = utcnow,
        webhook: bool = False,
        poll_timeout: int = 1,
        wrap: Callable[[Any], Any] = lambda sink: sink,
    ) -> Stack:
        channel = TelegramChannel(
            TOKEN,
            fake.url,
            webhook_url=HOOK_URL if webhook else None,
            webhook_secret=SECRET if webhook else None,
            poll_timeout=poll_timeout,
            backoff=Backoff(first=0.01, cap=0.1),
        )
        failures: list[OutboxRow] = []

        async def on_failure(row: OutboxRow) -> None:
            failures.append(row)

        channels = {"telegram": channel}
        outbox = Outbox(
            db,
            channels,
            clock,
            backoff=Backoff(first=0.01, cap=0.01, retries=2),
            on_failure=on_failure,
            poll_seconds=0.02,
        )
        settings = make_settings(owner_telegram_ids=[OWNER])
        owner = OwnerSettings(db, clock, settings.timezone)
        deps = AgentDeps(
            settings=settings, db=db, http=http, outbox=outbox, owner=owner, clock=clock,
            reach=reach(Owners(settings), channels),
        )  # fmt: skip
        dispatcher = Dispatcher(deps, Agent(model, _catalog()))
        pipeline = Pipeline(db, dispatcher.handle, outbox, channels, clock)
        stack = Stack(fake, channel, pipeline, outbox, failures)
        stacks.append(stack)
        await outbox.start()
        await channel.start(wrap(pipeline.submit))
        return stack

    yield make
    for stack in stacks:
        await stack.stop()


async def settle(stack: Stack, update: Doc) -> None:
    """Wait until ``update`` was confirmed and everything it caused is done."""
    await stack.fake.wait_confirmed(update["update_id"])
    await stack.pipeline.join()
    await outbox_drained(stack.outbox)
