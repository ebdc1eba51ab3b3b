"""A stranger's counts (``settings`` ``stranger:<channel>:<id>``) are read by their
store into a ``StrangerSeen``: a document damaged by hand costs nothing but the
damaged field, and the stranger is still counted and answered."""

from __future__ import annotations

from datetime import datetime

from pymongo.asynchronous.database import AsyncDatabase

from agent.conversation.dispatch import refusal
from tests.channels.telegram_kit import STRANGER, Build, Doc, build, fake, settle
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import FakeTelegram

__all__ = ["build", "fake"]  # the fixtures this module uses


async def test_a_damaged_refusal_time_still_refuses_and_counts(
    build: Build, fake: FakeTelegram, db: AsyncDatabase[Doc]
) -> None:
    key = f"stranger:telegram:{STRANGER}"
    await db["settings"].insert_one({"_id": key, "count": 3, "chars": 40, "refused_at": "today"})
    model = ScriptedModel(lambda r: "should not be called")
    stack = await build(model)

    update = fake.push_text(STRANGER, "hi, who are you?")
    await settle(stack, update)

    assert [(s.chat_id, s.visible) for s in fake.sent] == [(str(STRANGER), refusal(str(STRANGER)))]
    assert model.requests == []
    stats = await db["settings"].find_one({"_id": key})
    assert stats is not None and stats["count"] == 4
    assert stats["chars"] == 40 + len("hi, who are you?")
    assert isinstance(stats["refused_at"], datetime)
