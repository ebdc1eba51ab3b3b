"""The owner says "check in on me 4 times a day" (issue 40, item 3): the pulse's final text is only
logged, so the model must hear, when it turns the pulse on, that check-ins the owner
asked for go in the notes; and a pulse reads that its notes may ask it to reach the
owner, so the check-in reaches the owner."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import parts_of, scheduled_app, tool_call, tool_results

pytestmark = pytest.mark.clock(datetime(2026, 11, 26, 12, 0, tzinfo=BERLIN))
CHAT = "777"
ASKED = "The owner asked to be checked in on 4 times a day: each pulse, ask how they are."


async def test_check_in_on_me_four_times_a_day_reaches_the_owner(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], pulse=True,
        timezone="Europe/Berlin", owner_telegram_ids=[int(CHAT)],
    ) as app:  # fmt: skip
        ctx = owner_ctx(app.deps, channel="telegram", chat_id=CHAT)
        model.responder = sequence(
            tool_call("manage_pulse", action="update_config", enabled=True, pulses_per_day=4),
            tool_call("manage_pulse", action="update_notes", notes=ASKED),
            "I'll check in 4 times a day.",
        )
        await app.agent.respond("Check in on me 4 times a day", ctx)
        [turned_on, _notes] = tool_results(model)
        asked = len(model.requests)
        model.responder = sequence(
            tool_call("send_message", channel="telegram", to="owner", text="How are you?"),
            "Checked in.",
        )
        await parts_of(app).engine.run_pulse_now("manual")
        pulse = model.requests[asked]

    assert turned_on["note"] == (
        "A pulse's final text is only logged: it messages the owner when it matters or its "
        "notes ask for it. For check-ins the owner asked for, say so with update_notes."
    )
    assert turned_on["pulse"]["pulses_per_day"] == 4
    assert "Reach the owner with send_message when it matters or your notes ask for it." in (
        pulse.system
    )
    brief = pulse.messages[-1].text
    assert ASKED in brief
    assert "Reach the owner only with send_message, when it matters or your notes ask for it" in (
        brief
    )
    assert telegram.texts(CHAT)[-1] == "How are you?"
