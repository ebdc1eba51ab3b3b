"""``watchkeeper pair --new`` (DESIGN.md, Commands): strangers who fill the pairing slots
cannot keep the owner out. The owner makes a code on the server and sends it to the bot;
the whole app runs against the fake Bot API, and the command runs on the same database.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.cli.command import cli_command
from agent.cli.pair import pair
from agent.config import Settings
from agent.conversation.dispatch import refusal
from agent.conversation.pairing import busy_text
from agent.conversation.pairing import welcome as welcome_text
from storage.repos.pairing import PairingStore
from tests.agent.app.test_pairing_e2e import Start, code_in, push, settings, settle, start
from tests.agent.cli.procs import free_port, run_env
from tests.fakes.clock import FakeClock
from tests.fakes.fixtures import fake
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import FakeTelegram

__all__ = ["fake", "settings", "start"]  # fixtures, imported for pytest

Doc = dict[str, Any]
STRANGERS = (201, 202, 203)
OWNER = 300
SECOND = 301
OWNERS_CODE = re.compile(r"/start (\d{12})")


async def new_code(settings: Settings, clock: FakeClock) -> str:
    out = io.StringIO()
    assert await pair(settings, None, new=True, out=out, clock=clock) == 0
    found = OWNERS_CODE.search(out.getvalue())
    assert found is not None, out.getvalue()
    assert "within 10 minutes" in out.getvalue()
    return found.group(1)


async def test_strangers_fill_the_slots_and_the_owner_pairs_with_a_new_code(
    start: Start,
    fake: FakeTelegram,
    settings: Settings,
    db: AsyncDatabase[Doc],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = FakeClock(datetime.now(UTC))
    model = ScriptedModel(lambda r: "At your service.")
    async with start(model, clock) as app:
        for user in STRANGERS:  # each writes once: the three slots are theirs
            await settle(app, fake, push(fake, user, "hi"))
            assert code_in(fake.sent[-1].visible)
        await settle(app, fake, push(fake, OWNER, "hello, it's me", username="the_owner"))
        assert (fake.sent[-1].chat_id, fake.sent[-1].visible) == (
            str(OWNER),
            busy_text(cli_command()),
        )
        assert f"{cli_command()} pair --new" in busy_text(cli_command())

        code = await new_code(settings, clock)
        assert await db["pairing"].count_documents({"kind": "code"}) == 3  # not a 4th slot
        stored = [str(doc) async for doc in db["pairing"].find()]
        assert not any(code in doc for doc in stored)  # only its hash is kept
        listed = io.StringIO()
        assert await pair(settings, None, list_only=True, out=listed, clock=clock) == 0
        assert (
            f"owner's code ({cli_command()} pair --new) waiting, valid until" in listed.getvalue()
        )

        # A stranger writing again meanwhile is shown their code again, and nothing more.
        clock.advance(minutes=9)
        await settle(app, fake, push(fake, STRANGERS[0], "me again"))
        assert fake.sent[-1].chat_id == str(STRANGERS[0]) and code_in(fake.sent[-1].visible)
        await settle(app, fake, push(fake, OWNER, f"/start {code}", username="the_owner"))
        assert (fake.sent[-1].chat_id, fake.sent[-1].visible) == (
            str(OWNER),
            welcome_text(zone_known=False),
        )
        assert (
            f"@the_owner (Telegram 300) sent the code from `{cli_command()} pair --new`"
            in caplog.text
        )
        await settle(app, fake, push(fake, OWNER, "what's on today?"))
        assert fake.sent[-1].visible == "At your service."
        assert [r.messages[-1].text for r in model.requests] == ["what's on today?"]

        # Used once: a stranger sending the same code later is refused like any other.
        await settle(app, fake, push(fake, STRANGERS[1], code))
        assert fake.sent[-1].visible == refusal(str(STRANGERS[1]))
        assert await db["pairing"].count_documents({"kind": "code"}) == 0

        # With an owner known, another code still pairs a second account of theirs.
        second = await new_code(settings, clock)
        await settle(app, fake, push(fake, SECOND, f"  {second[:4]} {second[4:8]}-{second[8:]} "))
        assert (fake.sent[-1].chat_id, fake.sent[-1].visible) == (
            str(SECOND),
            welcome_text(zone_known=False),
        )
        assert app.dispatcher.pairing is not None
        owners = await app.dispatcher.pairing.store.owners()
        assert [(o.user_id, o.label()) for o in owners] == [
            (OWNER, "@the_owner"),
            (SECOND, "User301"),
        ]
    assert [r.messages[-1].text for r in model.requests] == ["what's on today?"]


async def test_an_owners_code_expires_and_a_late_sender_is_not_paired(
    start: Start, fake: FakeTelegram, settings: Settings
) -> None:
    clock = FakeClock(datetime.now(UTC))
    async with start(ScriptedModel(lambda r: "unused"), clock) as app:
        code = await new_code(settings, clock)
        clock.advance(minutes=10)
        await settle(app, fake, push(fake, OWNER, f"/start {code}"))
        assert fake.sent[-1].visible != welcome_text(zone_known=False)
        assert code_in(fake.sent[-1].visible)  # a stranger's code instead, as before
        assert app.dispatcher.pairing is not None
        assert await app.dispatcher.pairing.store.owners() == []


async def test_pair_takes_one_action_and_points_an_owners_code_to_the_bot(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await pair(settings, None, list_only=True, new=True) == 2
    assert "give one of CODE, --list, --new or --remove USER_ID" in capsys.readouterr().err
    assert await pair(settings, "123456789012") == 2
    assert "send it to the bot on Telegram instead" in capsys.readouterr().err


async def test_the_command_line_prints_a_code_the_store_knows(
    mongo_server: str, db: AsyncDatabase[Doc], tmp_path: Path
) -> None:
    env = run_env(
        tmp_path, free_port(), MONGODB_URI=mongo_server + "?directConnection=true",
        MONGODB_DB=db.name,
    )  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agent", "pair", "--new"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = OWNERS_CODE.search(done.stdout)
    assert found is not None, done.stdout
    owner = await PairingStore(db, lambda: datetime.now(UTC)).claim(found.group(1), 9, "9", "Me")
    assert owner is not None and owner.user_id == 9
