"""Which alert a reply answers, read from the outbox as the real outbox leaves it.

Every quoted Telegram reply and every SMS/WhatsApp "k" asks the outbox, which keeps
every message ever sent; these lookups read only alert-carrying messages (a sparse
index) or what was sent within the window, and must stay right while doing so.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from channels.delivery.outbox import Outbox
from channels.types import OutboundMessage
from storage import collections as c
from storage.repos.sent_alerts import last_sent_alert, last_sent_to, replied_alert
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.waiting import until_async

Doc = dict[str, Any]
T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def message(chat: str, key: str, *, alert: str | None = None, channel: str = "sms") -> Any:
    meta = {"alert_code": alert} if alert else {}
    return OutboundMessage(channel, chat, f"text {key}", key, meta=meta)


async def test_a_quoted_alert_is_found_among_many_ordinary_messages(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(T0)
    telegram = RecordingChannel("telegram")
    outbox = Outbox(db, {"telegram": telegram}, clock)
    for i in range(150):
        await outbox.enqueue(message("42", f"chat:{i}", channel="telegram"))
    await outbox.enqueue(message("42", "alert:7:0:telegram", alert="7", channel="telegram"))
    await outbox.enqueue(message("42", "confirm:7", alert="7", channel="telegram"))
    for i in range(150, 300):
        await outbox.enqueue(message("42", f"chat:{i}", channel="telegram"))
    ids = {m.idempotency_key: n for n, m in enumerate(telegram.sent, start=1)}

    found = await replied_alert(db, "telegram", "42", str(ids["alert:7:0:telegram"]))
    assert found is not None and (found.code, found.is_alert) == ("7", True)
    confirmation = await replied_alert(db, "telegram", "42", str(ids["confirm:7"]))
    assert confirmation is not None and (confirmation.code, confirmation.is_alert) == ("7", False)
    assert await replied_alert(db, "telegram", "42", str(ids["chat:5"])) is None
    # Telegram message ids are per chat: the same id quoted in another chat is not it.
    assert await replied_alert(db, "telegram", "43", str(ids["alert:7:0:telegram"])) is None


async def test_a_k_answers_the_alert_last_sent_to_that_chat_whatever_went_elsewhere(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(T0)
    outbox = Outbox(db, {"sms": RecordingChannel("sms")}, clock)
    await outbox.enqueue(message("+15550001", "alert:9:0:sms", alert="9"))
    for i in range(120):  # a busy stretch of replies to other people, after the alert
        clock.advance(seconds=1)
        await outbox.enqueue(message(f"+1555{i:04d}9", f"other:{i}"))
    since = T0 - timedelta(minutes=30)
    assert await last_sent_alert(db, "sms", ["+15550001"], since) == "9"
    assert await last_sent_alert(db, "whatsapp", ["+15550001"], since) is None
    # Sent before the window: too old to be what a "k" answers.
    assert await last_sent_alert(db, "sms", ["+15550001"], T0 + timedelta(seconds=1)) is None


async def test_across_the_owners_chats_anything_sent_to_them_after_the_alert_hides_it(
    db: AsyncDatabase[Doc],
) -> None:
    """For words that are also conversation ("weekly"), the alert must be the last thing
    sent to the owner on any chat: an answer on Telegram after an SMS page hides it."""
    clock = FakeClock(T0)
    channels = {"sms": RecordingChannel("sms"), "telegram": RecordingChannel("telegram")}
    outbox = Outbox(db, channels, clock)
    owner = [("sms", "+15550001"), ("telegram", "42")]
    since = T0 - timedelta(minutes=30)
    await outbox.enqueue(message("+15550001", "alert:4:0:sms", alert="4"))
    clock.advance(seconds=1)
    await outbox.enqueue(message("77", "to someone else", channel="telegram"))
    assert await last_sent_to(db, owner, since) == "4"
    clock.advance(seconds=1)
    await outbox.enqueue(message("42", "an answer", channel="telegram"))
    assert await last_sent_to(db, owner, since) is None
    assert await last_sent_to(db, owner[:1], since) == "4"  # the SMS chat alone


async def test_a_message_stored_before_the_alert_but_sent_after_it_hides_it(
    db: AsyncDatabase[Doc],
) -> None:
    """The order is the order of sending: a reply that waited for its retry and went out
    after the alert is the last thing the owner saw, so a "k" does not ack the alert."""
    clock = FakeClock(T0)
    sms = RecordingChannel("sms")
    outbox = Outbox(db, {"sms": sms}, clock)
    await outbox.enqueue(message("+15550001", "late"), send_now=False)  # waits for the loop
    clock.advance(minutes=1)
    await outbox.enqueue(message("+15550001", "alert:3:0:sms", alert="3"))
    since = T0 - timedelta(minutes=30)
    assert await last_sent_alert(db, "sms", ["+15550001"], since) == "3"

    clock.advance(minutes=1)
    await outbox.start(sole_owner=True)
    try:
        sent = {"idempotency_key": "late", "status": "sent"}

        async def late_sent() -> bool:
            return await db[c.OUTBOX].count_documents(sent) == 1

        await until_async(late_sent, "the late message sent by the loop")
    finally:
        await outbox.stop()
    late = await db[c.OUTBOX].find_one(sent)
    assert late is not None
    assert [m.idempotency_key for m in sms.sent] == ["alert:3:0:sms", "late"]
    assert late["sent_at"] > late["created_at"]
    assert await last_sent_alert(db, "sms", ["+15550001"], since) is None
