"""Pairing end to end: the whole app against the fake Bot API, with no Telegram owner
configured; ``watchkeeper pair`` (its function, or the command in a process of its own,
on the same database) approves."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.pairing import pairing_feature
from agent.cli.command import cli_command
from agent.cli.pair import pair
from agent.config import Settings
from agent.conversation.dispatch import refusal
from agent.conversation.pairing import busy_text
from agent.conversation.pairing import welcome as welcome_text
from channels.telegram import TelegramChannel
from runtime.backoff import Backoff
from tests.agent.cli.procs import free_port, run_env
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.fixtures import fake
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
NEWCOMER = 777
OTHER = 888
SECRET = "my bank PIN is 4711"
CODE = re.compile(r"`?\S+ pair (\d{6})")
Start = Callable[..., AbstractAsyncContextManager[App]]


@pytest.fixture
def settings(app_db: AppDb, db: AsyncDatabase[Doc], tmp_path: Path) -> Settings:
    return make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=db.name,
        data_dir=app_db.data_dir or tmp_path,  # the pair command finds the database there
        telegram_bot_token=TOKEN,
    )


@pytest.fixture
def start(fake: FakeTelegram, settings: Settings, app_db: AppDb) -> Start:
    @asynccontextmanager
    async def run(model: ScriptedModel, clock: Callable[[], datetime]) -> AsyncIterator[App]:
        bot = TelegramChannel(TOKEN, fake.url, poll_timeout=1, backoff=Backoff(first=0.01, cap=0.1))
        async with build_app(
            settings,
            embedded=app_db.server,
            model=model,
            channels=[bot],
            clock=clock,
            features=[pairing_feature],
            cli=cli_command(),  # as `watchkeeper run` passes it
        ) as app:
            yield app

    return run


def push(fake: FakeTelegram, user: int, text: str, username: str | None = None) -> Doc:
    message = fake.message(user, text=text)
    if username:
        message["from"]["username"] = username
    return fake.push_update({"message": message})


async def settle(app: App, fake: FakeTelegram, update: Doc) -> None:
    await fake.wait_confirmed(update["update_id"])
    await app.pipeline.join()


def code_in(text: str) -> str:
    found = CODE.search(text)
    assert found is not None, text
    return found.group(1)


async def test_a_newcomer_pairs_and_is_answered_as_the_owner(
    start: Start,
    fake: FakeTelegram,
    settings: Settings,
    db: AsyncDatabase[Doc],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO)
    model = ScriptedModel(lambda r: "Hello, owner.")
    async with start(model, lambda: datetime.now(UTC)) as app:
        push(fake, NEWCOMER, SECRET, username="ann_new")
        [shown] = await fake.wait_sent(1)
        code = code_in(shown.visible)
        assert shown.chat_id == str(NEWCOMER) and "valid for 10 minutes" in shown.visible
        assert (
            f"run `{cli_command()} pair {code}` to make @ann_new (Telegram 777) the owner"
            in caplog.text
        )
        await settle(app, fake, push(fake, NEWCOMER, "hello? " + SECRET))
        assert len(fake.sent) == 1  # one code message a minute, the rest is silence
        # While nobody is owner, the log has the pairing line, not "ignored ... sender".
        assert "ignored a telegram message" not in caplog.text

        wrong = "000000" if code != "000000" else "111111"
        assert await pair(settings, wrong) == 2
        assert f"no pending pairing code {wrong}" in capsys.readouterr().err
        assert await pair(settings, code) == 0
        assert "@ann_new (Telegram 777) is now an owner" in capsys.readouterr().out
        welcome = (await fake.wait_sent(2))[1]  # the running outbox sends the greeting
        greeting = welcome_text(zone_known=False)
        assert (welcome.chat_id, welcome.visible) == (str(NEWCOMER), greeting)

        await settle(app, fake, push(fake, NEWCOMER, "what can you do?"))
        assert fake.sent[-1].visible == "Hello, owner."
        assert len(model.requests) == 1 and model.requests[0].messages[-1].text.endswith(
            "what can you do?"
        )
        assert app.deps.reach.address("telegram") == str(NEWCOMER)  # alerts go there now
        await settle(app, fake, push(fake, NEWCOMER, "/status"))
        assert "Telegram owners: @ann_new (Telegram 777), paired" in fake.sent[-1].visible

        # Once there is an owner, a stranger is refused as before, with no code.
        await settle(app, fake, push(fake, OTHER, "me too"))
        assert fake.sent[-1].visible == refusal(str(OTHER))
        assert " pair " not in fake.sent[-1].visible
        assert f"ignored a telegram message from unknown sender id {OTHER}" in caplog.text
        assert await db["pairing"].count_documents({"kind": "code"}) == 0

    # What the newcomer wrote before pairing was never kept nor shown to the model.
    for name in ("inbox", "messages", "conversations", "settings", "pairing", "outbox"):
        stored = [json.dumps(doc, default=str) async for doc in db[name].find()]
        assert not any("4711" in text for text in stored), name
    assert not any("4711" in json.dumps(r.messages, default=str) for r in model.requests)
    assert await pair(settings, None, list_only=True) == 0
    assert "owner: @ann_new (Telegram 777), paired" in capsys.readouterr().out


async def test_an_owner_paired_in_another_process_is_known_and_settings_stay_as_given(
    start: Start, fake: FakeTelegram, settings: Settings, db: AsyncDatabase[Doc], tmp_path: Path
) -> None:
    """``watchkeeper pair CODE`` in a process of its own: the running app answers the new
    owner as the owner, from the database, and its ``Settings`` stay what the
    environment said (no owner written into them)."""
    as_given = settings.model_copy(deep=True)
    model = ScriptedModel(lambda r: "Hello, owner.")
    async with start(model, lambda: datetime.now(UTC)) as app:
        await settle(app, fake, push(fake, NEWCOMER, "hi", username="ann_new"))
        code = code_in(fake.sent[-1].visible)
        env = run_env(
            tmp_path, free_port(), MONGODB_URI=settings.mongodb_uri or "", MONGODB_DB=db.name,
            DATA_DIR=str(settings.data_dir),  # the running app's: its embedded database
        )  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "agent", "pair", code],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "@ann_new (Telegram 777) is now an owner" in done.stdout
        welcome = (await fake.wait_sent(2))[1]  # the running outbox sends the greeting
        assert welcome.visible == welcome_text(zone_known=False)
        await settle(app, fake, push(fake, NEWCOMER, "what can you do?"))
        assert fake.sent[-1].visible == "Hello, owner."
        assert len(model.requests) == 1
        assert app.deps.reach.address("telegram") == str(NEWCOMER)
    assert settings == as_given
    assert settings.owner_telegram_ids == []


async def test_three_codes_at_most_and_an_expired_code_is_refused(
    start: Start, fake: FakeTelegram, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(datetime.now(UTC))
    model = ScriptedModel(lambda r: "should not be called")
    async with start(model, clock) as app:
        codes = []
        for user in (101, 102, 103):
            await settle(app, fake, push(fake, user, "hi"))
            codes.append(code_in(fake.sent[-1].visible))
        assert len(set(codes)) == 3
        await settle(app, fake, push(fake, 104, "hi"))
        assert (fake.sent[-1].chat_id, fake.sent[-1].visible) == ("104", busy_text(cli_command()))
        await settle(app, fake, push(fake, 104, "hi again"))
        assert len(fake.sent) == 4  # "try later" at most once a minute too

        clock.advance(minutes=10)
        assert await pair(settings, codes[0], clock=clock) == 2
        assert "expired" in capsys.readouterr().err
        await settle(app, fake, push(fake, 104, "and now?"))
        assert fake.sent[-1].chat_id == "104"  # the three expired: room for a new code
        assert code_in(fake.sent[-1].visible)
        await settle(app, fake, push(fake, 101, "me again"))
        renewed = code_in(fake.sent[-1].visible)
        assert await pair(settings, renewed, clock=clock) == 0
        assert "(Telegram 101) is now an owner" in capsys.readouterr().out
        assert model.requests == []


async def test_no_code_is_handed_out_in_a_group(
    start: Start, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    async with start(ScriptedModel(lambda r: "unused"), lambda: datetime.now(UTC)) as app:
        message = fake.message(NEWCOMER, chat_id=-1001, text="hi all")
        await settle(app, fake, fake.push_update({"message": message}))
        assert [(s.chat_id, s.visible) for s in fake.sent] == [("-1001", refusal(str(NEWCOMER)))]
        assert await db["pairing"].count_documents({}) == 0
