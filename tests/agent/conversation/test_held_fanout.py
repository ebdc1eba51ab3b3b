"""Issue 28, item 7: the sends one exchange holds for new recipients are one question
to the owner with one code; that code sends each of them exactly once, "cancel" none.

The whole app (alerts feature for SMS through the fake Twilio, scheduling for
``send_message``), the owner's chat a recording Telegram channel, the model scripted."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.conversation.held_sends import confirm_held_send
from agent.llm.types import ModelMessage, ToolCallPart
from channels.delivery.outbox import Outbox
from channels.types import InboundMessage, OutboundMessage
from storage.repos.held_sends import HeldSends
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_TG, Harness, alert_app
from tests.fakes.scripted import Request
from tests.waiting import until

NUMBERS = [f"+1555020{n:04d}" for n in range(20)]
ASK = re.compile(r"Reply 'send (\d{4})' to send all (\d+), or 'cancel \1' to drop them all\.")


def _app(app_db: AppDb) -> Any:
    """Alerts (the SMS channel) and scheduling (``send_message``), no timers."""
    features = (scheduling(SchedulingOptions(timer=False)),)
    return alert_app(app_db, features=features, sms_per_hour=100)


def _sends(channel: str, recipients: list[str], texts: list[str]) -> ModelMessage:
    parts = [
        ToolCallPart(
            id=f"call_{i}", name="send_message", arguments={"channel": channel, "to": to, "text": t}
        )
        for i, (to, t) in enumerate(zip(recipients, texts, strict=True))
    ]
    return ModelMessage(role="assistant", parts=list(parts))


def _fan_out(h: Harness, call: ModelMessage) -> None:
    """The model sends in one turn, then says it asked the owner."""

    def respond(request: Request) -> Any:
        return "I asked you first." if request.messages[-1].role == "tool" else call

    h.model.responder = respond


def _asks(h: Harness) -> list[str]:
    return [t for t in h.chat.texts(str(OWNER_TG)) if t.startswith("✋")]


def _results(h: Harness) -> list[dict[str, Any]]:
    return [p.result for p in h.model.requests[-1].messages[-1].parts]


async def test_twenty_new_numbers_are_one_question_and_one_code_sends_each_once(
    app_db: AppDb,
) -> None:
    async with _app(app_db) as h:
        _fan_out(h, _sends("sms", NUMBERS, ["The office is closed today."] * 20))
        await h.chat.say("tell everyone on the list the office is closed")
        await h.settle()
        [ask] = _asks(h)
        found = ASK.search(ask)
        assert found is not None and found.group(2) == "20", ask
        code = found.group(1)
        listed = re.findall(r"^• (\+\d+) \(sms\)$", ask, re.MULTILINE)
        assert listed == NUMBERS
        assert ask.count("The office is closed today.") == 1  # the same text, shown once
        results = _results(h)
        assert {r["code"] for r in results} == {code} and len(results) == 20
        assert all(r["queued"] is False for r in results) and h.sms == []
        assert h.chat.texts(str(OWNER_TG))[-1] == "I asked you first."

        await h.chat.say(f"send {code}")
        await h.settle()
        assert Counter(s.fields["To"] for s in h.twilio.sent) == Counter(NUMBERS)
        assert set(h.sms) == {"The office is closed today."}
        reply = h.chat.texts(str(OWNER_TG))[-1]
        assert reply.startswith("Sent to +15550200000, +15550200001,") and "on sms" in reply

        await h.chat.say(f"send {code}")  # again: nothing more is sent
        await h.settle()
        assert "No message is waiting" in h.chat.texts(str(OWNER_TG))[-1]
        assert len(h.twilio.sent) == 20
        assert len(h.model.requests) == 2  # confirmations never reach the model


async def test_different_texts_are_each_shown_and_cancel_drops_them_all(
    app_db: AppDb,
) -> None:
    async with _app(app_db) as h:
        chats = ["-1001", "-1002", "-1003"]
        texts = [f"Hello group {n}" for n in range(3)]
        _fan_out(h, _sends("telegram", chats, texts))
        await h.chat.say("greet the three groups")
        await h.settle()
        [ask] = _asks(h)
        for chat, text in zip(chats, texts, strict=True):
            assert f"• {chat} (telegram): “{text}”" in ask
        code = re.findall(r"'cancel (\d{4})'", ask)[0]

        await h.chat.say(f"cancel {code}")
        await h.settle()
        assert h.chat.texts(str(OWNER_TG))[-1] == "Dropped: none of the 3 messages was sent."
        await h.chat.say(f"send {code}")
        await h.settle()
        assert "No message is waiting" in h.chat.texts(str(OWNER_TG))[-1]
        assert all(h.chat.texts(chat) == [] for chat in chats)


async def test_the_send_limit_per_exchange_still_counts_only_what_is_sent(
    app_db: AppDb,
) -> None:
    async with _app(app_db) as h:
        to_owner = [(str(OWNER_TG), f"note {n}") for n in range(6)]
        new = [(NUMBERS[0], "hi"), (NUMBERS[1], "hi")]
        recipients, texts = zip(*(new[:1] + to_owner + new[1:]), strict=True)
        channels = ["sms", *["telegram"] * 6, "sms"]
        parts = [
            ToolCallPart(id=f"c{i}", name="send_message",
                         arguments={"channel": ch, "to": to, "text": t})
            for i, (ch, to, t) in enumerate(zip(channels, recipients, texts, strict=True))
        ]  # fmt: skip
        _fan_out(h, ModelMessage(role="assistant", parts=list(parts)))
        await h.chat.say("notes and two new numbers")
        await h.settle()
        results = _results(h)
        assert results[0]["needs_owner_confirmation"] is True  # held: not a send
        assert [r.get("queued") for r in results[1:6]] == [True] * 5
        assert "at most 5 messages" in results[6]["error"]
        assert "at most 5 messages" in results[7]["error"]  # the cap holds new ones too
        [ask] = _asks(h)
        assert NUMBERS[0] in ask and NUMBERS[1] not in ask
        assert "send a sms message to" in ask  # one held: the one-message question


async def test_a_confirmation_replayed_after_a_crash_half_way_sends_each_once(
    app_db: AppDb,
) -> None:
    async with _app(app_db) as h:
        _fan_out(h, _sends("sms", NUMBERS[:6], ["Meeting moved to 3 pm."] * 6))
        await h.chat.say("tell the team")
        await h.settle()
        code = _results(h)[0]["code"]
        deps = h.app.deps
        assert deps.outbox is not None
        dying = CrashingOutbox(deps.db, deps.channels, h.clock, after=2)
        crashing = owner_ctx(dataclasses.replace(deps, outbox=dying), channel="telegram")
        confirm = InboundMessage("telegram", "u-crash", str(OWNER_TG), str(OWNER_TG),
                                 f"send {code}", h.clock())  # fmt: skip
        try:
            await confirm_held_send(confirm, crashing)
        except Killed:
            pass
        else:
            raise AssertionError("the outbox was to die after two sends")
        await until(lambda: len(h.twilio.sent) == 2, "the two sends queued before it died")
        assert len(dying.queued) == 2  # died half-way; the group is still approved
        assert await HeldSends(deps.db).decline(code, h.clock()) is None  # too late to cancel
        replies = await confirm_held_send(confirm, owner_ctx(deps, channel="telegram"))
        assert replies is not None and replies[0].text.startswith("Sent to ")
        assert Counter(s.fields["To"] for s in h.twilio.sent) == Counter(NUMBERS[:6])


async def test_an_exchange_replayed_after_a_crash_asks_once_and_holds_each_once(
    app_db: AppDb,
) -> None:
    async with _app(app_db) as h:
        calls = _sends("sms", NUMBERS[:5], ["Closed today."] * 5)
        attempts: list[int] = []

        def respond(request: Request) -> Any:
            if request.messages[-1].role != "tool":
                attempts.append(1)
                return calls
            if len(attempts) == 1:
                raise Killed("after the sends were held, before the answer was stored")
            return "I asked you first."

        h.model.responder = respond
        ctx = owner_ctx(h.app.deps, channel="telegram", chat_id=str(OWNER_TG),
                        sender=str(OWNER_TG), conversation_key=f"telegram:{OWNER_TG}",
                        run_id="exchange-1")  # fmt: skip
        try:
            await h.app.agent.respond("tell them", ctx)
        except Killed:
            pass
        else:
            raise AssertionError("the first attempt was to die")
        assert len(_asks(h)) == 1  # asked as the loop ended, even by a crash
        reply = await h.app.agent.respond("tell them", dataclasses.replace(ctx, replay=True))
        assert reply.text == "I asked you first." and len(attempts) == 2
        [ask] = _asks(h)  # the replay's question is the same one
        code = re.findall(r"'send (\d{4})'", ask)[0]
        assert {r["code"] for r in _results(h)} == {code}
        [group] = [g async for g in h.app.deps.db["settings"].find({"_id": f"held_send:{code}"})]
        assert len(group["sends"]) == 5

        await h.chat.say(f"send {code}")
        await h.settle()
        assert Counter(s.fields["To"] for s in h.twilio.sent) == Counter(NUMBERS[:5])


class Killed(BaseException):
    """The process dies here: nothing of ours catches it, as with a real crash."""


class CrashingOutbox(Outbox):
    """Queues ``after`` messages, then dies."""

    def __init__(self, *args: Any, after: int) -> None:
        super().__init__(*args)
        self.after = after
        self.queued: list[str] = []

    async def enqueue(self, message: OutboundMessage, *, send_now: bool = True) -> bool:
        if len(self.queued) == self.after:
            raise Killed("between two sends of one confirmation")
        self.queued.append(message.chat_id)
        return await super().enqueue(message, send_now=send_now)
