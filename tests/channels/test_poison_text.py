"""Poison text at every entrance: lone UTF-16 surrogates and invalid UTF-8 become U+FFFD.

Each transport is the real one (python-telegram-bot against the fake Bot API, neonize
protobuf events, the terminal reading a real text stream, aiohttp's server), and so is
the model adapter (the OpenAI SDK against the fake chat completions server).
"""

from __future__ import annotations

import asyncio
import io
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from neonize.proto.Neonize_pb2 import Connected
from neonize.proto.waE2E.WAWebProtobufsE2E_pb2 import Message
from pymongo import AsyncMongoClient

from agent.app.core import build_app
from agent.app.registry import REGISTRY, replaced, whatsapp_entry
from agent.conversation.dispatch import refusal
from agent.llm.openai.model import OpenAIModel
from channels.console import ConsoleChannel
from channels.delivery.text import clean_text
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, alert_app
from tests.fakes.fixtures import openai_api
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.fakes.whatsapp import FakeClient, jid, message_event
from tests.waiting import until

__all__ = ["openai_api"]  # a fixture, imported for pytest

Doc = dict[str, Any]
OWNER = 4242
STRANGER = 777
LONE = "\ud83d"  # the first half of an emoji's surrogate pair, alone
FFFD = "\ufffd"


def test_clean_text_replaces_only_what_cannot_be_encoded() -> None:
    assert clean_text("plain ünïcödé 😀") == "plain ünïcödé 😀"
    assert clean_text(f"a{LONE}b") == f"a{FFFD}b"
    assert clean_text("\udcff tail") == f"{FFFD} tail"  # surrogateescape'd byte
    assert clean_text("\ud83d\ude00") == "😀"  # a pair split in two code points is joined
    assert clean_text(b"caf\xe9 \xff") == f"caf{FFFD} {FFFD}"
    assert clean_text(b"ok \xc3\xa9") == "ok é"


@pytest.fixture
async def db_name(mongo_client: AsyncMongoClient[Doc]) -> AsyncIterator[str]:
    name = f"poison_{uuid.uuid4().hex[:10]}"
    yield name
    await mongo_client.drop_database(name)


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


def _settings(app_db: AppDb, db_name: str, tmp_path: Path, **extra: Any) -> Any:
    return make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=db_name,
        data_dir=tmp_path,
        **extra,
    )


def _telegram_settings(app_db: AppDb, db_name: str, tmp_path: Path, fake: FakeTelegram) -> Any:
    return _settings(
        app_db,
        db_name,
        tmp_path,
        telegram_bot_token=TOKEN,
        telegram_api_base_url=fake.url,
        owner_telegram_ids=[OWNER],
    )


def _last_user_text(fake: FakeOpenAI) -> str:
    return fake.last_words(len(fake.bodies) - 1)  # without Watchkeeper's note


async def test_a_lone_surrogate_from_a_stranger_does_not_hold_up_the_owner(
    app_db: AppDb, db_name: str, tmp_path: Path, telegram: FakeTelegram, openai_api: FakeOpenAI
) -> None:
    settings = _telegram_settings(app_db, db_name, tmp_path, telegram)
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    openai_api.reply_text("Hello, owner.")
    openai_api.reply_text("Read you.")
    async with build_app(settings, embedded=app_db.server, model=model, features=[]) as app:
        poison = telegram.push_text(STRANGER, f"hi {LONE} there")
        owner = telegram.push_text(OWNER, "are you there?")
        sent = await telegram.wait_sent(2)
        assert {(s.chat_id, s.visible) for s in sent} == {
            (str(STRANGER), refusal(str(STRANGER))),
            (str(OWNER), "Hello, owner."),
        }
        await telegram.wait_confirmed(owner["update_id"])
        assert poison["update_id"] in telegram.confirmed
        # The owner's own text with a lone surrogate is stored and read with U+FFFD.
        telegram.push_text(OWNER, f"caf{LONE} au lait")
        await telegram.wait_sent(3)
        await app.pipeline.join()
        assert telegram.sent[-1].visible == "Read you."
        assert _last_user_text(openai_api) == f"caf{FFFD} au lait"
        inbox = app.deps.db["inbox"]
        texts = [d["text"] async for d in inbox.find({"sender_id": str(OWNER)})]
        assert texts == ["are you there?", f"caf{FFFD} au lait"]
        assert await inbox.count_documents({"status": "done"}) == 3
        assert app.status()["telegram"]["connected"] is True
    await model.aclose()


async def test_a_model_reply_with_a_lone_surrogate_is_stored_and_delivered(
    app_db: AppDb, db_name: str, tmp_path: Path, telegram: FakeTelegram, openai_api: FakeOpenAI
) -> None:
    settings = _telegram_settings(app_db, db_name, tmp_path, telegram)
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    openai_api.reply_text(f"Here you go {LONE}!")
    async with build_app(settings, embedded=app_db.server, model=model, features=[]) as app:
        update = telegram.push_text(OWNER, "send me an emoji")
        [sent] = await telegram.wait_sent(1)
        assert sent.visible == f"Here you go {FFFD}!"
        await telegram.wait_confirmed(update["update_id"])
        await app.pipeline.join()
        db = app.deps.db
        answer = await db["messages"].find_one({"role": "assistant"})
        assert answer is not None and answer["parts"][0]["text"] == f"Here you go {FFFD}!"
        row = await db["inbox"].find_one({"external_id": str(update["update_id"])})
        assert row is not None and row["status"] == "done"
    # A restart finds nothing left to do: the answer is not produced (or billed) again.
    openai_api.reply_text("must not be asked")
    async with build_app(settings, embedded=app_db.server, model=model, features=[]) as app:
        assert await app.pipeline.recover(sole_owner=True) == 0
        await app.pipeline.join()
    await model.aclose()
    assert len(openai_api.requests) == 1 and len(telegram.sent) == 1


async def test_invalid_utf8_typed_into_the_terminal_is_read_with_replacements(
    app_db: AppDb,
    db_name: str,
    tmp_path: Path,
    openai_api: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    typed = b"caf\xe9 au lait\n\xff\xfe\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(typed), encoding="utf-8"))
    openai_api.reply_text("One coffee.")
    openai_api.reply_text("Noted.")
    out = io.StringIO()
    console = ConsoleChannel(out=out)  # the default reader: input() on sys.stdin
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    settings = _settings(app_db, db_name, tmp_path)
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[console], features=[]
    ) as app:
        await asyncio.wait_for(console.closed.wait(), 5)
        await app.pipeline.join()
        rows = app.deps.db["inbox"].find({}, sort=[("received_at", 1), ("external_id", 1)])
        texts = [d["text"] async for d in rows]
    await model.aclose()
    assert texts == [f"caf{FFFD} au lait", f"{FFFD}{FFFD}"]
    assert "watchkeeper> One coffee." in out.getvalue()
    assert "watchkeeper> Noted." in out.getvalue()


async def test_an_alert_posted_with_a_lone_surrogate_is_raised(app_db: AppDb) -> None:
    auth = {"Authorization": f"Bearer {ADMIN}"}
    async with alert_app(app_db) as h:
        body = {"severity": "info", "title": f"disk {LONE} full", "body": "b\udcff"}
        resp = await h.client.post("/api/alerts", json=body, headers=auth)
        assert resp.status == 201, await resp.text()
        created = await resp.json()
        assert created["title"] == f"disk {FFFD} full" and created["body"] == f"b{FFFD}"
        await h.settle()
        assert any(f"disk {FFFD} full" in text for text in h.chat.texts())


async def test_invalid_utf8_in_a_whatsapp_message_reaches_the_agent_replaced(
    app_db: AppDb, db_name: str, tmp_path: Path, openai_api: FakeOpenAI
) -> None:
    owner = "+4915100000001"
    clients: list[FakeClient] = []

    def factory(path: str) -> FakeClient:
        clients.append(FakeClient(path))
        return clients[-1]

    bad = b"caf\xe9 \xff!"  # not UTF-8: what a buggy client may put on the wire
    wire = Message(conversation="x" * len(bad)).SerializeToString()
    broken = Message.FromString(wire.replace(b"x" * len(bad), bad))
    openai_api.reply_text("Got it.")
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    settings = _settings(app_db, db_name, tmp_path, whatsapp_enabled=True, owner_phone=owner)
    whatsapp = whatsapp_entry(factory, burst_seconds=0.05, health_every=3600)
    registry = replaced(REGISTRY, whatsapp)
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[], registry=registry
    ) as app:
        client = clients[0]
        await client.emit(Connected())
        await client.emit(message_event(jid(owner), jid(owner), message=broken))
        await until(lambda: client.sent, "the answer sent")
        await app.pipeline.join()
        row = await app.deps.db["inbox"].find_one({"channel": "whatsapp"})
    await model.aclose()
    assert row is not None and row["text"] == f"caf{FFFD} {FFFD}!"
    assert _last_user_text(openai_api).endswith(f"caf{FFFD} {FFFD}!")
