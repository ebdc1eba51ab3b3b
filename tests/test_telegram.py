"""The Telegram channel through the real python-telegram-bot against a fake Bot API,
with the real pipeline, outbox, dispatcher and agent (scripted model) on a real database."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pymongo.asynchronous.database import AsyncDatabase
from telegram import Message

from agent.context import AgentDeps
from agent.conversation.agent import APOLOGY, Agent
from agent.conversation.dispatch import REFUSAL, Dispatcher
from agent.llm.base import ModelClient
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec
from agent.tools.catalog import ToolCatalog
from channels.outbox import Outbox
from channels.pipeline import Pipeline
from channels.telegram import SECRET_HEADER, TelegramChannel
from channels.telegram_format import split_text, to_html, utf16_length
from channels.telegram_inbound import describe
from channels.types import Button, InboundMessage, OutboundMessage, SendError
from tests.conftest import make_settings
from tests.fakes.scripted import ScriptedModel, unavailable
from tests.fakes.telegram_api import TOKEN, FakeTelegram

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


def _utcnow() -> datetime:
    return datetime.now(UTC)


class BlockingModel:
    """A model that never answers: the process is 'killed' while it thinks."""

    name = "blocking"

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        return None


@dataclass
class Stack:
    fake: FakeTelegram
    channel: TelegramChannel
    pipeline: Pipeline
    outbox: Outbox
    failures: list[Doc] = field(default_factory=list)

    async def stop(self) -> None:
        await self.channel.stop()
        await self.pipeline.stop(grace=0)  # abrupt: a crash leaves work unfinished
        await self.outbox.stop()


Build = Callable[..., Any]


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def build(db: AsyncDatabase[Doc], fake: FakeTelegram) -> AsyncIterator[Build]:
    stacks: list[Stack] = []

    async def make(
        model: ModelClient,
        *,
        clock: Callable[[], datetime] = _utcnow,
        webhook: bool = False,
        poll_timeout: int = 1,
        wrap: Callable[[Any], Any] = lambda sink: sink,
    ) -> Stack:
        deps = AgentDeps(settings=make_settings(owner_telegram_ids=[OWNER]), db=db, clock=clock)
        channel = TelegramChannel(
            TOKEN,
            fake.url,
            webhook_url=HOOK_URL if webhook else None,
            webhook_secret=SECRET if webhook else None,
            poll_timeout=poll_timeout,
            retry_delays=(0.01, 0.1),
        )
        failures: list[Doc] = []

        async def on_failure(doc: Doc) -> None:
            failures.append(doc)

        channels = {"telegram": channel}
        outbox = Outbox(
            db, channels, clock, delays=(0.01, 0.01), on_failure=on_failure, poll_seconds=0.02
        )
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
    await asyncio.sleep(0.05)


async def test_round_trip(build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]) -> None:
    model = ScriptedModel(lambda r: "Hi there, **owner**.")
    stack = await build(model)
    update = fake.push_text(OWNER, "hello")
    [sent] = await fake.wait_sent(1)
    assert (sent.chat_id, sent.visible, sent.parse_mode) == (str(OWNER), "Hi there, owner.", "HTML")
    assert model.requests[0].messages[-1].text == "hello"
    assert (str(OWNER), "typing") in fake.chat_actions
    assert {c["command"] for c in fake.commands} >= {"start", "help", "status", "reset"}
    assert fake.calls_to("deleteWebhook")
    await settle(stack, update)
    doc = await db["inbox"].find_one({"external_id": str(update["update_id"])})
    assert doc is not None and doc["status"] == "done" and doc["sender_id"] == str(OWNER)
    status = stack.channel.status()
    assert status["mode"] == "polling" and status["connected"] is True
    assert status["bot"] == fake.username and status["last_update_at"] is not None


async def test_same_update_twice_gives_one_reply(build: Build, fake: FakeTelegram) -> None:
    model = ScriptedModel(lambda r: "once")
    stack = await build(model)
    update = fake.push_text(OWNER, "hello")
    fake.requeue(update)  # the same update_id twice in one getUpdates batch
    await fake.wait_sent(1)
    await settle(stack, update)
    assert len(fake.sent) == 1 and len(model.requests) == 1


async def test_stranger_is_refused_once_a_day(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    model = ScriptedModel(lambda r: "should not be called")
    stack = await build(model)
    fake.push_text(STRANGER, "hi, who are you?")
    [sent] = await fake.wait_sent(1)
    assert sent.chat_id == str(STRANGER) and sent.visible == REFUSAL
    second = fake.push_text(STRANGER, "hello??")
    await settle(stack, second)
    assert len(fake.sent) == 1 and model.requests == []
    assert await db["inbox"].count_documents({"sender_id": str(STRANGER)}) == 2


async def test_long_reply_is_split_on_paragraphs(build: Build, fake: FakeTelegram) -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 178 for i in range(10)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    assert len(text) > 9000
    await build(ScriptedModel(lambda r: text))
    fake.push_text(OWNER, "tell me everything")
    sent = await fake.wait_sent(3)
    await asyncio.sleep(0.1)
    assert len(fake.sent) == 3
    assert all(utf16_length(s.visible) <= 4096 for s in sent)
    assert "\n\n".join(s.visible for s in sent) == text


async def test_webhook_checks_secret_and_json(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    model = ScriptedModel(lambda r: "via webhook")
    stack = await build(model, webhook=True)
    assert fake.webhook is not None and fake.webhook["url"] == HOOK_URL
    assert fake.webhook["secret_token"] == SECRET and not fake.calls_to("getUpdates")
    app = web.Application()
    app.router.add_post("/webhooks/telegram", stack.channel.handle_webhook)
    update = {"update_id": 9001, "message": fake.message(OWNER, text="hook hello")}
    async with TestClient(TestServer(app)) as client:
        for headers in ({SECRET_HEADER: "wrong"}, {}):
            resp = await client.post("/webhooks/telegram", json=update, headers=headers)
            assert resp.status == 403
        assert await db["inbox"].count_documents({}) == 0
        good = {SECRET_HEADER: SECRET}
        for body in ("{not json", "[]", '{"no": "update_id"}'):
            resp = await client.post("/webhooks/telegram", data=body, headers=good)
            assert resp.status == 400
        assert await db["inbox"].count_documents({}) == 0
        for _ in range(2):  # Telegram redelivers: still one reply
            resp = await client.post("/webhooks/telegram", json=update, headers=good)
            assert resp.status == 200
        await fake.wait_sent(1)
        await stack.pipeline.join()
    assert [s.visible for s in fake.sent] == ["via webhook"] and len(model.requests) == 1


async def test_webhook_answers_500_when_not_stored(fake: FakeTelegram) -> None:
    stored: list[InboundMessage] = []

    async def flaky(message: InboundMessage) -> bool:
        if not stored:
            stored.append(message)
            raise RuntimeError("database down")
        return True

    channel = TelegramChannel(TOKEN, fake.url, webhook_url=HOOK_URL, webhook_secret=SECRET)
    await channel.start(flaky)
    app = web.Application()
    app.router.add_post("/webhooks/telegram", channel.handle_webhook)
    update = {"update_id": 5, "message": fake.message(OWNER, text="x")}
    try:
        async with TestClient(TestServer(app)) as client:
            headers = {SECRET_HEADER: SECRET}
            first = await client.post("/webhooks/telegram", json=update, headers=headers)
            second = await client.post("/webhooks/telegram", json=update, headers=headers)
            assert (first.status, second.status) == (500, 200)
    finally:
        await channel.stop()


async def test_restart_between_receipt_and_reply(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    blocking = BlockingModel()
    first = await build(blocking)
    update = fake.push_text(OWNER, "are you there?")
    await asyncio.wait_for(blocking.entered.wait(), 5)
    await first.stop()  # "kill": the worker is cancelled mid-request
    fake.requeue(update)  # and Telegram offers the update again after the restart
    model = ScriptedModel(lambda r: "back again")
    second = await build(model)
    assert await second.pipeline.recover() == 0  # another instance may still be on it
    assert await second.pipeline.recover(sole_owner=True) == 1
    await fake.wait_sent(1)
    await settle(second, update)
    assert [s.visible for s in fake.sent] == ["back again"] and len(model.requests) == 1
    doc = await db["inbox"].find_one({"external_id": str(update["update_id"])})
    assert doc is not None and doc["status"] == "done"


async def test_restart_with_reply_already_in_outbox(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    fake.hanging.add("sendMessage")
    first = await build(ScriptedModel(lambda r: "stored reply"))
    update = fake.push_text(OWNER, "ping")
    await fake.wait_for(lambda: bool(fake.calls_to("sendMessage")))
    await first.stop()  # died while sending: the outbox entry is left "sending"
    fake.hanging.clear()
    model = ScriptedModel(lambda r: "must not be asked")
    second = await build(model)
    await second.outbox.recover(all_sending=True)  # as the owner of the database does
    await second.pipeline.recover(sole_owner=True)
    await fake.wait_sent(1)
    await settle(second, update)
    assert [s.visible for s in fake.sent] == ["stored reply"] and model.requests == []
    assert await db["outbox"].count_documents({"status": "sent"}) == 1


async def test_model_failure_apologises_and_keeps_message(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    await build(ScriptedModel(lambda r: unavailable()))
    update = fake.push_text(OWNER, "remember the milk")
    [sent] = await fake.wait_sent(1)
    assert sent.visible == APOLOGY
    assert await db["inbox"].find_one({"external_id": str(update["update_id"])}) is not None
    stored = [json.dumps(d, default=str) async for d in db["messages"].find()]
    assert any("remember the milk" in d for d in stored)


async def test_rejected_formatting_is_resent_as_plain_text(
    build: Build, fake: FakeTelegram
) -> None:
    fake.reject_html = True
    await build(ScriptedModel(lambda r: "**bold** & <odd>"))
    fake.push_text(OWNER, "format please")
    [sent] = await fake.wait_sent(1)
    assert sent.parse_mode is None and sent.text == "**bold** & <odd>"
    assert [c.get("parse_mode") for c in fake.calls_to("sendMessage")] == ["HTML", None]


async def test_media_reaches_the_model_as_markers(build: Build, fake: FakeTelegram) -> None:
    model = ScriptedModel(lambda r: "nice")
    await build(model)
    fake.push_photo(OWNER, caption="my cat")
    fake.push_content(OWNER, voice={"file_id": "v", "file_unique_id": "v1", "duration": 12})
    await fake.wait_sent(2)
    seen = [r.messages[-1].text for r in model.requests]
    assert seen == ["[Photo] my cat", "[Voice note 0:12]"]


async def test_unsupported_updates_are_logged_and_skipped(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="channels.telegram")
    stack = await build(ScriptedModel(lambda r: "fine"))
    edited = fake.message(OWNER, text="edited", edit_date=int(time.time()))
    fake.push_update({"edited_message": edited})
    joined = {"new_chat_members": [{"id": 5, "is_bot": False, "first_name": "X"}]}
    fake.push_content(OWNER, **joined)
    last = fake.push_text(OWNER, "still there?")
    await fake.wait_sent(1)
    await settle(stack, last)
    assert await db["inbox"].count_documents({}) == 1
    assert "edited_message" in caplog.text and caplog.text.count("ignored telegram update") == 2


async def test_button_press_becomes_a_message(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    model = ScriptedModel(lambda r: "acknowledged")
    stack = await build(model)
    update = fake.push_callback(OWNER, "ack #A7", message_id=555)
    await fake.wait_sent(1)
    await settle(stack, update)
    assert model.requests[0].messages[-1].text == "ack #A7"
    assert fake.answered_callbacks == ["cb555"]
    doc = await db["inbox"].find_one({"external_id": str(update["update_id"])})
    assert doc is not None and doc["reply_to"] == "555"


async def test_buttons_go_on_the_last_chunk_and_retries_resume(
    build: Build, fake: FakeTelegram
) -> None:
    stack = await build(ScriptedModel(lambda r: "-"))
    text = "first part. " * 400 + "\n\nlast part"
    msg = OutboundMessage("telegram", str(OWNER), text, "k1", buttons=(Button("Ack", "ack"),))
    fake.fail("sendMessage", 500, "Internal Server Error", after=1)
    with pytest.raises(SendError) as failed:
        await stack.channel.send(msg)
    assert failed.value.retryable
    result = await stack.channel.send(msg)  # only the unsent chunk goes out again
    assert len(fake.sent) == 2 and len(result.external_ids) == 2
    assert fake.sent[0].button_data == [] and fake.sent[1].button_data == ["ack"]


async def test_send_retried_after_server_errors(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    fake.fail("sendMessage", 500, "Internal Server Error", times=2)
    stack = await build(ScriptedModel(lambda r: "eventually"))
    update = fake.push_text(OWNER, "hi")
    await fake.wait_sent(1)
    await settle(stack, update)
    assert [s.visible for s in fake.sent] == ["eventually"]
    assert len(fake.calls_to("sendMessage")) == 3
    doc = await db["outbox"].find_one({})
    assert doc is not None and doc["status"] == "sent" and doc["attempts"] == 3


async def test_blocked_bot_fails_the_outbox_entry(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    fake.fail("sendMessage", 403, "Forbidden: bot was blocked by the user")
    stack = await build(ScriptedModel(lambda r: "you blocked me"))
    fake.push_text(OWNER, "hi")
    await fake.wait_for(lambda: bool(stack.failures))
    doc = await db["outbox"].find_one({})
    assert doc is not None and doc["status"] == "failed" and "blocked" in doc["last_error"]
    assert len(stack.failures) == 1 and fake.sent == []


async def test_polling_survives_errors_and_never_logs_the_token(
    build: Build, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("channels.telegram", "telegram", "httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    fake.fail("getUpdates", 502, "Bad Gateway", times=2)
    attempts: list[int] = []

    def wrap(sink: Any) -> Any:
        async def flaky(message: InboundMessage) -> bool:
            attempts.append(1)
            if len(attempts) == 1:
                raise RuntimeError("database hiccup")
            result: bool = await sink(message)
            return result

        return flaky

    stack = await build(ScriptedModel(lambda r: "still here"), wrap=wrap)
    update = fake.push_text(OWNER, "hello")
    await fake.wait_sent(1)
    await settle(stack, update)
    assert len(fake.sent) == 1 and len(attempts) == 2
    assert "Bad Gateway" in caplog.text and "HTTP Request" in caplog.text
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text


async def test_conflict_and_bad_command_menu_do_not_stop_polling(
    build: Build, fake: FakeTelegram
) -> None:
    fake.fail("setMyCommands", 400, "Bad Request: command is invalid")
    fake.fail("getUpdates", 409, "Conflict: can't use getUpdates while webhook is active")
    await build(ScriptedModel(lambda r: "polling again"))
    fake.push_text(OWNER, "hello")
    await fake.wait_sent(1)
    assert len(fake.calls_to("deleteWebhook")) == 2  # the conflict re-ran the set-up


async def test_stop_cancels_the_long_poll_promptly(build: Build, fake: FakeTelegram) -> None:
    stack = await build(ScriptedModel(lambda r: "-"), poll_timeout=30)
    await fake.wait_for(lambda: bool(fake.calls_to("getUpdates")))
    started = time.monotonic()
    await stack.channel.stop()
    assert time.monotonic() - started < 2.5
    assert stack.channel.status()["connected"] is False


async def test_bad_token_fails_start_without_showing_it(fake: FakeTelegram) -> None:
    channel = TelegramChannel("999:wrong-token-value", fake.url)
    with pytest.raises(RuntimeError) as failed:
        await channel.start(lambda m: asyncio.sleep(0, True))
    assert "wrong-token-value" not in str(failed.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"text": "plain"}, "plain"),
        ({"document": {"file_id": "d", "file_unique_id": "d1", "file_name": "report.pdf"},
          "caption": "Q3"}, "[Document report.pdf] Q3"),
        ({"sticker": {"file_id": "s", "file_unique_id": "s1", "width": 1, "height": 1,
          "is_animated": False, "is_video": False, "type": "regular", "emoji": "😀"}},
         "[Sticker 😀]"),
        ({"location": {"latitude": 52.5, "longitude": 13.4}}, "[Location 52.5, 13.4]"),
        ({"contact": {"phone_number": "+4930123", "first_name": "Ann"}},
         "[Contact Ann +4930123]"),
        ({"audio": {"file_id": "a", "file_unique_id": "a1", "duration": 3725,
          "title": "Song"}}, "[Audio Song 1:02:05]"),
        ({"new_chat_title": "renamed"}, None),
    ],
)  # fmt: skip
def test_describe(content: Doc, expected: str | None) -> None:
    base = {"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}}
    assert describe(Message.de_json({**base, **content}, None)) == expected


def test_split_and_html() -> None:
    assert split_text("short") == ["short"]
    chunks = split_text("Sentence one. " * 700, limit=4096)
    assert all(c.endswith(".") and len(c) <= 4096 for c in chunks)
    assert [len(c) for c in split_text("x" * 5000)] == [4096, 904]
    assert all(utf16_length(c) <= 4096 for c in split_text("😀" * 3000))
    assert to_html("**b** & <x> `a<b` *i* snake_case") == (
        "<b>b</b> &amp; &lt;x&gt; <code>a&lt;b</code> <i>i</i> snake_case"
    )
    assert to_html("```\nif a < b:\n```") == "<pre>if a &lt; b:</pre>"
