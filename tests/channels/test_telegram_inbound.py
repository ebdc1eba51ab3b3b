"""Telegram inbound: updates through the real python-telegram-bot from a fake Bot API to
the agent (scripted model) on a real database; polling, restarts, media, buttons."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from telegram import Message

from agent.conversation.agent import APOLOGY
from agent.conversation.dispatch import refusal
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec
from channels.telegram import TelegramChannel
from channels.telegram.inbound import describe
from channels.types import InboundMessage
from tests.channels.telegram_kit import OWNER, STRANGER, Build, Doc, build, fake, settle
from tests.fakes.scripted import ScriptedModel, unavailable
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["build", "fake"]  # fixtures, imported for pytest


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


class SlowModel(ScriptedModel):
    """Answers once the chat shows "typing...": a reply slower than the indicator's
    ``after``, however slow the machine."""

    def __init__(self, fake: FakeTelegram, responder: Any) -> None:
        super().__init__(responder)
        self.fake = fake

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        await self.fake.wait_for(lambda: (str(OWNER), "typing") in self.fake.chat_actions)
        return await super().request(system, messages, tools)


async def test_round_trip(build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]) -> None:
    model = SlowModel(fake, lambda r: "Hi there, **owner**.")
    stack = await build(model)
    stack.pipeline.typing.after = 0.05  # "typing..." only for a reply slower than this
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
    assert sent.chat_id == str(STRANGER) and sent.visible == refusal(str(STRANGER))
    second = fake.push_text(STRANGER, "hello??")
    await settle(stack, second)
    assert len(fake.sent) == 1 and model.requests == []
    assert await db["inbox"].count_documents({"sender_id": str(STRANGER)}) == 2


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
    # Answered by whoever handles it, with what it did (agent.conversation.buttons);
    # the channel keeps the press's id and the message it sat on for that answer.
    assert fake.answered_callbacks == []
    doc = await db["inbox"].find_one({"external_id": str(update["update_id"])})
    assert doc is not None and doc["reply_to"] == "555"
    assert doc["meta"] == {"callback_query_id": "cb555", "kind": "button", "shown": "question"}


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
    async with asyncio.timeout(20):  # the poll it cancels would have lasted 30 s
        await stack.channel.stop()
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
