"""A stranger whose first name is "@realowner" cannot pass for the Telegram user
@realowner in the log: a handle comes only from Telegram's username field and is shown
as ``@handle``; a display name never shows ``@`` or parentheses (``realowner``). The whole app
runs against the fake Bot API, as in the field report."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from tests.agent.app.test_pairing_e2e import Start, settings, settle, start
from tests.fakes.fixtures import fake
from tests.fakes.scripted import ScriptedModel
from tests.fakes.telegram_api import FakeTelegram

__all__ = ["fake", "settings", "start"]  # fixtures, imported for pytest

REAL = 501
IMPOSTOR = 666


async def test_a_first_name_that_looks_like_a_handle_is_logged_quoted(
    start: Start, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start(ScriptedModel(lambda r: "unused"), lambda: datetime.now(UTC)) as app:
        real = fake.message(REAL, text="hi")
        real["from"].update(first_name="Real", username="realowner")
        await settle(app, fake, fake.push_update({"message": real}))
        impostor = fake.message(IMPOSTOR, text="hi, it's the owner")
        impostor["from"].update(first_name="@realowner", last_name="(Telegram 501)")
        await settle(app, fake, fake.push_update({"message": impostor}))

    lines = [r.getMessage() for r in caplog.records if r.name == "agent.conversation.pairing"]
    real_line, impostor_line = lines
    assert real_line.endswith(
        " to make @realowner (Telegram 501) the owner (code valid 10 minutes)"
    )
    assert impostor_line.endswith(
        " to make realowner Telegram 501 (Telegram 666) the owner (code valid 10 minutes)"
    )
    assert "make @realowner" not in impostor_line  # never shown the way the handle is
