"""A held group that cannot be read (a send without its text, a call without its tool:
written by hand or by a bug) is never sent or made, and never breaks the chat it is
named in: "send CODE" says nothing waits, and the owner's other groups still go."""

from __future__ import annotations

from datetime import timedelta

from storage.repos.held_sends import KEEP, PREFIX, HeldSend, HeldSends
from tests.databases import AppDb
from tests.fakes.alert_app import OWNER_TG, alert_app


async def test_a_damaged_group_is_refused_and_the_others_still_go(app_db: AppDb) -> None:
    async with alert_app(app_db, sms_per_hour=100) as h:
        settings = h.app.deps.db["settings"]
        now = h.clock()
        for code, damaged in (
            ("4711", {"sends": [{"channel": "sms", "chat_id": "+15550100"}]}),
            ("4712", {"actions": [{"arguments": "{}", "why": "read a page"}]}),
            ("4713", {"actions": [{"tool": "save_memory", "arguments": "{oops", "why": "x"}]}),
        ):
            await settings.insert_one(
                {"_id": f"{PREFIX}{code}", "key": f"k{code}", "exchange": None}
                | {"sends": [], "actions": [], "held_at": now, "expires_at": now + KEEP}
                | damaged
            )
        good = await HeldSends(h.app.deps.db).hold(
            HeldSend("sms", "+15550101", "see you at 6"), now, exchange="chat-1"
        )

        for word in ("send 4711", "approve 4712", "approve 4713", "cancel 4711"):
            await h.chat.say(word)
            await h.settle()
            answer = h.chat.texts(str(OWNER_TG))[-1]
            assert answer.startswith(("No message is waiting", "Nothing is waiting")), answer
        assert h.sms == []

        h.clock.advance(minutes=1)
        await h.chat.say(f"send {good.code}")
        await h.settle()
        assert h.chat.texts(str(OWNER_TG))[-1] == "Sent to +15550101 on sms."
        assert h.sms == ["see you at 6"]
        assert await HeldSends(h.app.deps.db).waiting(good.code, now + timedelta(minutes=1)) is None
