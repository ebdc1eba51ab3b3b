"""Telegram outbound and the webhook: replies through the real python-telegram-bot to a
fake Bot API (splitting, formatting, buttons, retries, failures), and the signed webhook."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pymongo.asynchronous.database import AsyncDatabase

from channels.telegram.channel import SECRET_HEADER, TelegramChannel
from channels.telegram.outbound import split_text, to_html, utf16_length
from channels.types import (
    PRESS_ANSWER,
    VERBATIM,
    Button,
    InboundMessage,
    OutboundMessage,
    SendError,
)
from tests.channels.telegram_kit import HOOK_URL, OWNER, SECRET, Build, Doc, build, fake, settle
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["build", "fake"]  # fixtures, imported for pytest


# -- the webhook ------------------------------------------------------------------------
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


# -- sending ----------------------------------------------------------------------------
async def test_long_reply_is_split_on_paragraphs(build: Build, fake: FakeTelegram) -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 178 for i in range(10)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    assert len(text) > 9000
    stack = await build(ScriptedModel(lambda r: text))
    update = fake.push_text(OWNER, "tell me everything")
    sent = await fake.wait_sent(3)
    await settle(stack, update)
    assert len(fake.sent) == 3
    assert all(utf16_length(s.visible) <= 4096 for s in sent)
    assert "\n\n".join(s.visible for s in sent) == text


async def test_restart_while_the_answer_was_being_sent(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    fake.hanging.add("sendMessage")
    first = await build(ScriptedModel(lambda r: "stored reply"))
    update = fake.push_text(OWNER, "ping")
    await fake.wait_for(lambda: bool(fake.calls_to("sendMessage")))
    await first.stop()  # died while sending; the answer was stored before it was sent
    assert await db["messages"].count_documents({"role": "assistant"}) == 1
    fake.hanging.clear()
    model = ScriptedModel(lambda r: "must not be asked")
    second = await build(model)
    await second.outbox.recover(all_sending=True)  # as the owner of the database does
    await second.pipeline.recover(sole_owner=True)
    await fake.wait_sent(1)
    await settle(second, update)
    assert [s.visible for s in fake.sent] == ["stored reply"] and model.requests == []
    assert await db["outbox"].count_documents({"status": "sent"}) == 1


async def test_restart_after_the_answer_was_stored_but_not_sent(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    first = await build(ScriptedModel(lambda r: "the answer"))
    update = fake.push_text(OWNER, "ping")
    await fake.wait_sent(1)
    await settle(first, update)
    await first.stop()
    # What a kill between storing the exchange and sending its answer leaves behind.
    await db["outbox"].delete_many({})
    await db["inbox"].update_many({}, {"$set": {"status": "processing"}})
    fake.sent.clear()
    model = ScriptedModel(lambda r: "must not be asked")
    second = await build(model)
    assert await second.pipeline.recover(sole_owner=True) == 1
    await fake.wait_sent(1)
    await settle(second, update)
    assert [s.visible for s in fake.sent] == ["the answer"] and model.requests == []
    assert await db["messages"].count_documents({"role": "user"}) == 1  # stored once
    assert await db["outbox"].count_documents({"status": "sent"}) == 1


async def test_restart_after_a_delivery_that_was_not_recorded(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    fake.hang_after_delivery = True
    first = await build(ScriptedModel(lambda r: "the answer"))
    update = fake.push_text(OWNER, "ping")
    await fake.wait_sent(1)
    await first.stop()  # died after Telegram took the message, before it said so
    fake.hang_after_delivery = False
    model = ScriptedModel(lambda r: "must not be asked")
    second = await build(model)
    await second.outbox.recover(all_sending=True)
    await second.pipeline.recover(sole_owner=True)
    await fake.wait_sent(2)
    await settle(second, update)
    # The window every outbox has between a send and its record: the same answer goes
    # again, read back from the conversation (no second model call, no other text).
    assert [s.visible for s in fake.sent] == ["the answer", "the answer"]
    assert model.requests == []
    assert await db["outbox"].count_documents({"status": "sent"}) == 1


async def test_rejected_formatting_is_resent_as_plain_text(
    build: Build, fake: FakeTelegram
) -> None:
    fake.reject_html = True
    await build(ScriptedModel(lambda r: "**bold** & <odd>"))
    fake.push_text(OWNER, "format please")
    [sent] = await fake.wait_sent(1)
    assert sent.parse_mode is None and sent.text == "**bold** & <odd>"
    assert [c.get("parse_mode") for c in fake.calls_to("sendMessage")] == ["HTML", None]


async def test_a_verbatim_message_shows_every_character(build: Build, fake: FakeTelegram) -> None:
    """What the owner approves (``VERBATIM``): a Markdown link would show only its label
    and hide the address; ``**`` and ``_`` would vanish into formatting."""
    stack = await build(ScriptedModel(lambda r: "-"))
    text = '• send_message {"text": "[your invoice](https://evil.example/pay) **now** _x_"}'
    assert to_html(text) != text  # formatted, the address would not be seen
    await stack.channel.send(
        OutboundMessage("telegram", str(OWNER), text, "v1", meta={VERBATIM: True})
    )
    [sent] = fake.sent
    assert sent.parse_mode is None and sent.visible == text


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
    assert len(fake.sent) == 2
    assert result.external_ids == tuple(str(s.message_id) for s in fake.sent)
    assert fake.sent[0].button_data == [] and fake.sent[1].button_data == ["ack"]


def _press_answer(
    query: str, notice: str, edit: str | None, shown: str | None
) -> dict[str, object]:
    return {PRESS_ANSWER: {"query_id": query, "notice": notice, "edit": edit, "shown": shown}}


async def test_a_press_is_answered_and_its_message_edited_without_buttons(
    build: Build, fake: FakeTelegram
) -> None:
    stack = await build(ScriptedModel(lambda r: "-"))
    buttons = (Button("Approve", "h:ok:1234"),)
    await stack.channel.send(
        OutboundMessage("telegram", str(OWNER), "Do it?", "q", buttons=buttons)
    )
    [question] = fake.sent
    fake.push_callback(OWNER, "h:ok:1234", question.message_id)  # the press, as Telegram has it
    done = OutboundMessage(
        "telegram", str(OWNER), "✅ Approved by you at 14:02", "a1",
        meta=_press_answer("cb1000", "✅ Approved", str(question.message_id), "Do <b>it</b>?"),
    )  # fmt: skip
    result = await stack.channel.send(done)
    assert result.external_ids == (str(question.message_id),)
    assert [(a.query_id, a.text) for a in fake.answers] == [("cb1000", "✅ Approved")]
    assert question.visible == "Do it?\n\n✅ Approved by you at 14:02"
    assert question.reply_markup is None and len(fake.sent) == 1
    # Retried (the outbox lost the result): the press was answered already, the edit
    # changes nothing; neither is an error.
    assert await stack.channel.send(done) == result
    # An answer alone (nothing was done): the message stays as it is.
    again = OutboundMessage(
        "telegram", str(OWNER), "Already done", "a2",
        meta=_press_answer("cb1000-2", "Already done", None, None),
    )  # fmt: skip
    await stack.channel.send(again)
    assert fake.answers[-1].text == "Already done" and len(fake.edits) == 1


async def test_a_press_on_a_message_too_long_to_add_to_is_answered_by_a_reply(
    build: Build, fake: FakeTelegram
) -> None:
    stack = await build(ScriptedModel(lambda r: "-"))
    long = "x" * 4090
    buttons = (Button("Ack", "a:ack:12"),)
    await stack.channel.send(OutboundMessage("telegram", str(OWNER), long, "q", buttons=buttons))
    [alert] = fake.sent
    done = OutboundMessage(
        "telegram", str(OWNER), "✅ Acknowledged by you at 14:02", "a1",
        meta=_press_answer("cb1", "✅ Acknowledged", str(alert.message_id), long),
    )  # fmt: skip
    await stack.channel.send(done)
    assert alert.visible == long and alert.reply_markup is None  # only its buttons went
    assert [e.method for e in fake.edits] == ["editMessageReplyMarkup"]
    [_, words] = fake.sent
    assert words.visible == "✅ Acknowledged by you at 14:02"
    assert words.reply_to == alert.message_id


async def test_a_flood_refusal_is_waited_out_once_then_handed_back(
    build: Build, fake: FakeTelegram
) -> None:
    """A 429 with ``retry_after`` is tried again once, after the pause asked for; a
    second one goes back to the outbox as retryable, with the pause it asked for."""
    stack = await build(ScriptedModel(lambda r: "-"))
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    result = await stack.channel.send(OutboundMessage("telegram", str(OWNER), "once", "f1"))
    [sent] = fake.sent
    assert result.external_ids == (str(sent.message_id),) and sent.visible == "once"
    assert len(fake.calls_to("sendMessage")) == 2
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 1", times=2, retry_after=1)
    with pytest.raises(SendError) as refused:
        await stack.channel.send(OutboundMessage("telegram", str(OWNER), "twice", "f2"))
    assert refused.value.retryable and refused.value.retry_after == 1
    assert len(fake.calls_to("sendMessage")) == 4 and len(fake.sent) == 1


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


async def test_a_send_answered_without_an_id_counts_as_sent(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc], caplog: pytest.LogCaptureFixture
) -> None:
    fake.answer_without_ids = True
    stack = await build(ScriptedModel(lambda r: "delivered anyway"))
    update = fake.push_text(OWNER, "hi")
    await fake.wait_sent(1)
    await settle(stack, update)
    doc = await db["outbox"].find_one({})
    assert doc is not None and doc["status"] == "sent" and doc["external_ids"] == []
    assert len(fake.calls_to("sendMessage")) == 1  # not sent twice
    assert "gave no id" in caplog.text


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
