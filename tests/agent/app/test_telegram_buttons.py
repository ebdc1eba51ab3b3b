"""Issue 39, item 7: approvals and alerts by button on Telegram.

The whole app: the real Telegram channel (python-telegram-bot) on the Bot API fake,
the alerts feature, the real database. A held-call question carries Approve and
Cancel, an alert Ack, Snooze 1h and Resolve; a press is applied once, only from the
owner, answered (``answerCallbackQuery``) and the message edited to say what was done,
its buttons gone. Typed words keep working.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.alerts.router import AlertRouter
from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.conversation.buttons import NOT_OWNER, UNKNOWN
from agent.tools.sending import ask_owner
from storage.repos.alert_record import Alert
from storage.repos.held_sends import HeldAction, HeldRun, HeldSends
from tests.agent.app.media_e2e_kit import OWNER_TG, provider_settings
from tests.conftest import make_settings
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.telegram_api import TOKEN, Answer, FakeTelegram, Sent
from tests.waiting import outbox_drained, until

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

STRANGER = 777001
COUNTED = "ai_presses"
"""Where the held call writes: one row per time it is made."""


@dataclass
class Rig:
    app: App
    fake: FakeTelegram
    presses: list[dict[str, Any]] = field(default_factory=list)
    """Each press's update, as pushed."""

    @property
    def router(self) -> AlertRouter:
        router = self.app.deps.alerts
        assert isinstance(router, AlertRouter)
        return router

    async def made(self) -> int:
        """How many times the held call was made."""
        return await self.app.deps.db[COUNTED].count_documents({})

    async def hold(self) -> tuple[str, Sent]:
        """A run held one ``db_query`` after reading outside text; the owner is asked on
        Telegram (as the loop does when the run ends). Its code and the question."""
        chat = str(OWNER_TG)
        ctx = owner_ctx(
            self.app.deps,
            channel="telegram",
            chat_id=chat,
            sender=chat,
            conversation_key=f"telegram:{chat}",
        )
        insert = {"operation": "insertOne", "collection": COUNTED, "data": {"made": True}}
        why = "this run read web search results: words that are not the owner's"
        group = await HeldSends(self.app.deps.db).hold(
            HeldAction.of("db_query", insert, why),
            ctx.now,
            exchange=uuid.uuid4().hex,
            run=HeldRun(kind="chat", channel="telegram", chat_id=chat, sender=chat),
            untrusted=["web search results"],
        )
        await ask_owner(ctx, [group.code])
        return group.code, await self.sent_with(f"approve {group.code}")

    async def alert(self, title: str) -> tuple[Alert, Sent]:
        """A warning, sent to the owner's chat: the alert as stored once sent, and its
        message."""
        raised = await self.router.raise_alert(severity="warning", title=title)
        sent = await self.sent_with(title)
        alert = await self.router.store.by_code(raised.code)
        assert alert is not None
        return alert, sent

    async def sent_with(self, words: str) -> Sent:
        await until(lambda: any(words in m.visible for m in self.fake.sent), words)
        return next(m for m in self.fake.sent if words in m.visible)

    async def press(self, user: int, data: str, on: Sent) -> Answer:
        """Press the button with ``data`` on ``on`` as ``user``; the answer it got, once
        the press is handled."""
        update = self.fake.push_callback(user, data, on.message_id)
        self.presses.append(update)
        query = update["callback_query"]["id"]
        await until(lambda: any(a.query_id == query for a in self.fake.answers), "the answer")
        await self.app.pipeline.join()
        await outbox_drained(self.app.outbox)
        return next(a for a in self.fake.answers if a.query_id == query)

    async def typed(self, text: str) -> None:
        before = len(self.fake.sent)
        update = self.fake.push_text(OWNER_TG, text)
        await self.fake.wait_confirmed(update["update_id"])
        await until(lambda: len(self.fake.sent) > before, "the reply")
        await self.app.pipeline.join()


@contextlib.asynccontextmanager
async def rig(app_db: AppDb, tmp_path: Path) -> AsyncIterator[Rig]:
    async with contextlib.AsyncExitStack() as stack:
        fake = await stack.enter_async_context(FakeTelegram())
        openai = await stack.enter_async_context(FakeOpenAI())  # no model call is made
        gemini = await stack.enter_async_context(FakeGemini())
        db_name = f"buttons_{uuid.uuid4().hex[:10]}"
        settings = make_settings(
            mongodb_uri=app_db.mongodb_uri,
            mongodb_db=db_name,
            data_dir=tmp_path,
            telegram_bot_token=TOKEN,
            telegram_api_base_url=fake.url,
            owner_telegram_ids=[OWNER_TG],
            **provider_settings("openai", gemini, openai),
        )
        features = [alerting(AlertingOptions(background=False))]
        app = await stack.enter_async_context(
            build_app(settings, embedded=app_db.server, features=features)
        )
        stack.push_async_callback(app.database.client.drop_database, db_name)
        await app.deps.owner.update(quiet_hours=[])  # warnings go out at any hour
        yield Rig(app, fake)
        assert openai.bodies == []  # buttons never reach the model


async def test_a_held_call_question_has_approve_and_cancel_and_approve_makes_it_once(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with rig(app_db, tmp_path) as r:
        code, question = await r.hold()
        assert question.button_labels == ["Approve", "Cancel"]
        assert question.button_data == [f"h:ok:{code}", f"h:no:{code}"]

        answer = await r.press(OWNER_TG, f"h:ok:{code}", question)
        assert await r.made() == 1
        assert answer.text == "✅ Approved"
        edited = r.fake.sent_message(question.message_id)
        assert edited is not None and edited.reply_markup is None  # the buttons are gone
        assert f"approve {code}" in edited.visible  # the question still reads as it did
        assert "✅ Approved by you at " in edited.visible and "db_query: done" in edited.visible
        assert len(r.fake.edits) == 1

        # Telegram offers the same update again (its confirmation was lost): stored
        # once, nothing more happens.
        [update] = r.presses
        r.fake.requeue(update)
        uid = update["update_id"]
        await until(lambda: r.fake.handed_out.count(uid) >= 2, "the replay handed out")
        # A second tap on the same button: answered, nothing made again.
        again = await r.press(OWNER_TG, f"h:ok:{code}", question)
        assert again.text is not None and again.text.startswith("Already done at ")
        assert await r.made() == 1 and len(r.fake.edits) == 1
        assert len(r.fake.sent) == 1  # no new message: the press answers on the phone


async def test_cancel_drops_the_held_call(app_db: AppDb, tmp_path: Path) -> None:
    async with rig(app_db, tmp_path) as r:
        code, question = await r.hold()
        answer = await r.press(OWNER_TG, f"h:no:{code}", question)
        assert answer.text == "✖️ Cancelled"
        assert await HeldSends(r.app.deps.db).waiting(code, r.app.deps.clock()) is None
        edited = r.fake.sent_message(question.message_id)
        assert edited is not None and edited.reply_markup is None
        assert "✖️ Cancelled by you at " in edited.visible
        # Approve pressed afterwards (a stale keyboard): nothing is made.
        late = await r.press(OWNER_TG, f"h:ok:{code}", question)
        assert late.text is not None and "Nothing is waiting" in late.text
        assert await r.made() == 0


async def test_a_strangers_press_changes_nothing_and_typed_approve_still_works(
    app_db: AppDb, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agent.conversation.buttons")
    async with rig(app_db, tmp_path) as r:
        code, question = await r.hold()
        answer = await r.press(STRANGER, f"h:ok:{code}", question)
        assert answer.text == NOT_OWNER
        assert await r.made() == 0 and r.fake.edits == []
        assert await HeldSends(r.app.deps.db).waiting(code, r.app.deps.clock()) is not None
        assert f"button press by {STRANGER} (not the owner)" in caplog.text
        assert [m.chat_id for m in r.fake.sent] == [str(OWNER_TG)]  # no refusal message

        await r.typed(f"approve {code}")
        assert await r.made() == 1
        assert "db_query: done" in r.fake.sent[-1].visible


async def test_malformed_button_data_is_answered_and_changes_nothing(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with rig(app_db, tmp_path) as r:
        code, question = await r.hold()
        for data in ("ack #A7", f"h:zap:{code}", f"x:ok:{code}", f"h:ok:{code}x", "h:ok:"):
            answer = await r.press(OWNER_TG, data, question)
            assert answer.text == UNKNOWN, data
        assert await r.made() == 0 and r.fake.edits == []
        assert await HeldSends(r.app.deps.db).waiting(code, r.app.deps.clock()) is not None
        assert len(r.fake.sent) == 1


async def test_an_alert_has_ack_snooze_and_resolve_and_each_applies(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with rig(app_db, tmp_path) as r:
        acked, ack_message = await r.alert("Disk 91% full")
        assert ack_message.button_labels == ["Ack", "Snooze 1h", "Resolve"]
        assert ack_message.button_data == [f"a:{a}:{acked.code}" for a in ("ack", "snz", "res")]
        assert acked.next_escalation_at is not None  # a warning's SMS is due

        answer = await r.press(OWNER_TG, f"a:ack:{acked.code}", ack_message)
        assert answer.text == "✅ Acknowledged"
        now = await r.router.store.by_code(acked.code)
        assert now is not None and now.status == "acknowledged"
        assert now.next_escalation_at is None  # escalation stopped
        assert now.acknowledged_by == "owner via telegram button"
        assert [s.by for s in now.history if s.action == "acknowledged"] == [now.acknowledged_by]
        edited = r.fake.sent_message(ack_message.message_id)
        assert edited is not None and edited.reply_markup is None
        assert "Disk 91% full" in edited.visible
        assert "✅ Acknowledged by you at " in edited.visible

        snoozed, snooze_message = await r.alert("Backup late")
        pressed_at = r.app.deps.clock()
        answer = await r.press(OWNER_TG, f"a:snz:{snoozed.code}", snooze_message)
        assert answer.text == "💤 Snoozed for 1h"
        now = await r.router.store.by_code(snoozed.code)
        assert now is not None and now.status == "snoozed" and now.snoozed_until is not None
        assert abs(now.snoozed_until - (pressed_at + timedelta(hours=1))) < timedelta(minutes=1)
        first_until = now.snoozed_until
        # Tapped twice: the snooze is not extended.
        again = await r.press(OWNER_TG, f"a:snz:{snoozed.code}", snooze_message)
        assert again.text is not None and again.text.startswith("Already done")
        now = await r.router.store.by_code(snoozed.code)
        assert now is not None and now.snoozed_until == first_until
        assert [s.action for s in now.history].count("snoozed") == 1

        resolved, resolve_message = await r.alert("Printer offline")
        answer = await r.press(OWNER_TG, f"a:res:{resolved.code}", resolve_message)
        assert answer.text == "✔️ Resolved"
        now = await r.router.store.by_code(resolved.code)
        assert now is not None and now.status == "resolved"
        edited = r.fake.sent_message(resolve_message.message_id)
        assert edited is not None and "✔️ Resolved by you at " in edited.visible


async def test_a_press_on_an_alert_already_acknowledged_by_typing_changes_nothing(
    app_db: AppDb, tmp_path: Path
) -> None:
    async with rig(app_db, tmp_path) as r:
        alert, message = await r.alert("Door open")
        await r.typed(f"#{alert.code} ack")
        answer = await r.press(OWNER_TG, f"a:ack:{alert.code}", message)
        assert answer.text == f"#{alert.code} was already acknowledged."
        now = await r.router.store.by_code(alert.code)
        assert now is not None and now.acknowledged_by == "owner via telegram"
        assert r.fake.edits == []
