"""Budgets on what the model can set off (DESIGN.md, limits): sends per exchange, one
SMS budget for every SMS, new recipients only with the owner's "send <code>", cron job
count and frequency, and a per-contact message rate."""

from __future__ import annotations

import re
from typing import Any

from agent.app.application import Parts
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.conversation.dispatch import SLOW_DOWN, TierResolver, Trust
from agent.llm.types import ModelMessage, ToolCallPart
from channels.types import InboundMessage
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_PHONE, OWNER_TG, alert_app
from tests.fakes.features import contributing
from tests.fakes.scripted import Request
from tests.scheduling_kit import call_tool

STRANGER_PHONE = "+15550109999"


def _app(app_db: AppDb, whatsapp: TierResolver | None = None, **settings: Any) -> Any:
    """``whatsapp``: who a WhatsApp message is from (as the WhatsApp feature decides)."""
    resolvers = {"whatsapp": whatsapp} if whatsapp is not None else {}
    return alert_app(
        app_db,
        features=(
            scheduling(SchedulingOptions(timer=False)),
            contributing(Parts(resolvers=resolvers)),
        ),
        extra_chats=("whatsapp",),
        **settings,
    )


def _calls(*calls: tuple[str, dict[str, Any]]) -> ModelMessage:
    parts = [
        ToolCallPart(id=f"call_{i}", name=name, arguments=args)
        for i, (name, args) in enumerate(calls)
    ]
    return ModelMessage(role="assistant", parts=list(parts))


async def test_at_most_five_sends_in_one_exchange(app_db: AppDb) -> None:
    async with _app(app_db) as h:
        sends = [
            ("send_message", {"channel": "telegram", "to": "owner", "text": f"note {i}"})
            for i in range(7)
        ]

        def respond(request: Request) -> Any:
            if request.messages[-1].role == "tool":
                return "done"
            return _calls(*sends)

        h.model.responder = respond
        await h.chat.say("send me seven notes")
        await h.settle()
        results = [p.result for p in h.model.requests[-1].messages[-1].parts]
        assert [r.get("queued") for r in results] == [True] * 5 + [None, None]
        assert "at most 5 messages may be sent in one exchange" in results[5]["error"]
        notes = [t for t in h.chat.texts() if t.startswith("note ")]
        assert notes == [f"note {i}" for i in range(5)]


async def test_one_hourly_sms_budget_for_sends_and_alerts(app_db: AppDb) -> None:
    async with _app(app_db, sms_per_hour=2) as h:
        ctx = owner_ctx(h.app.deps)
        first = await call_tool(h.app, "send_message", ctx, channel="sms", to="owner", text="a")
        second = await call_tool(h.app, "send_message", ctx, channel="sms", to="owner", text="b")
        third = await call_tool(
            h.app, "send_message", owner_ctx(h.app.deps), channel="sms", to="owner", text="c"
        )
        assert first["queued"] and second["queued"]
        assert "hourly SMS budget (2) is used up" in third["error"]
        assert h.sms == ["a", "b"]
        # An alert page comes out of the same budget (the router's limit is higher).
        await h.router.raise_alert(severity="critical", title="Pump failure")
        assert h.sms == ["a", "b"]
        assert any("SMS budget reached" in t for t in h.chat.texts())


async def test_a_new_recipient_waits_for_the_owners_send_code(app_db: AppDb) -> None:
    async with _app(app_db) as h:
        send = ("send_message", {"channel": "sms", "to": STRANGER_PHONE,
                                 "text": "Your parcel is here"})  # fmt: skip
        h.model.responder = lambda r: "asked" if r.messages[-1].role == "tool" else _calls(send)
        await h.chat.say("tell them the parcel is here")
        await h.settle()
        [held] = [p.result for p in h.model.requests[-1].messages[-1].parts]
        assert held["queued"] is False and held["needs_owner_confirmation"] is True
        assert h.sms == []
        [ask] = [t for t in h.chat.texts() if t.startswith("✋")]
        assert STRANGER_PHONE in ask and "Your parcel is here" in ask
        code = re.search(r"'send (\d{4})'", ask)
        assert code is not None and code.group(1) == held["code"]

        await h.chat.say(f"send {held['code']}")
        await h.settle()
        assert h.chat.texts()[-1] == f"Sent to {STRANGER_PHONE} on sms."
        assert h.twilio.sent[-1].fields["To"] == STRANGER_PHONE
        await h.chat.say(f"send {held['code']}")  # a second confirmation sends nothing
        await h.settle()
        assert "No message is waiting" in h.chat.texts()[-1]
        assert len([s for s in h.twilio.sent if s.fields["To"] == STRANGER_PHONE]) == 1
        assert len(h.model.requests) == 2  # confirmations never reach the model


async def test_owner_and_approved_recipients_need_no_confirmation(app_db: AppDb) -> None:
    async with _app(app_db) as h:
        to_owner = await call_tool(
            h.app, "send_message", channel="telegram", to=str(OWNER_TG), text="hi me"
        )
        assert to_owner["queued"] is True
        by_phone = await call_tool(h.app, "send_message", channel="sms", to=OWNER_PHONE, text="x")
        assert by_phone["queued"] is True


async def test_cron_job_count_and_frequency_limits(app_db: AppDb) -> None:
    async with _app(app_db, max_cron_jobs=3) as h:
        fast = await call_tool(
            h.app, "manage_cronjob", action="create", name="spam", instruction="x",
            cron_expression="* * * * *",
        )  # fmt: skip
        assert "may fire at most every 5 minutes" in fast["error"]
        for n in range(3):
            made = await call_tool(
                h.app, "manage_cronjob", action="create", name=f"job {n}", instruction="x",
                cron_expression=f"{n} 9 * * *",
            )  # fmt: skip
            assert "created" in made
        over = await call_tool(
            h.app, "manage_cronjob", action="create", name="one more", instruction="x",
            cron_expression="0 10 * * *",
        )  # fmt: skip
        assert "already 3 cron jobs" in over["error"]
        job_id = made["created"]["job_id"]
        faster = await call_tool(
            h.app, "manage_cronjob", action="update", job_id=job_id, cron_expression="*/2 * * * *"
        )
        assert "may fire at most every 5 minutes" in faster["error"]


async def test_a_contact_over_the_rate_gets_one_notice_and_no_model_calls(
    app_db: AppDb,
) -> None:
    async def contact(message: InboundMessage) -> Trust | None:
        return Trust("contact", can_reply=True)

    async with _app(app_db, whatsapp=contact, contact_messages_per_minute=3) as h:
        [whatsapp] = h.extra_chats
        for n in range(8):
            await whatsapp.say(f"message {n}", sender="+15550100777")
            await h.settle()
        assert len(h.model.requests) == 3
        assert whatsapp.texts().count(SLOW_DOWN) == 1
