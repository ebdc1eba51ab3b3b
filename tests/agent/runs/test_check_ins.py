"""The owner says "check in on me 4 times a day" (issue 40, item 2): the pulse the owner
asked for delivers its own answer to them, once, with no send_message needed, and its
brief says so; a pulse the owner never asked for still only logs its answer. Turning the
pulse off ends the check-ins."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.app.features.scheduling import SchedulingOptions, build_parts
from agent.context import Tally
from agent.runs.briefs import CHECK_IN
from agent.tools.pulse import CHECKING_IN, REACHING
from channels.types import OutboundMessage, SendResult
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import call_tool, parts_of, scheduled_app, tool_call, tool_results

pytestmark = pytest.mark.clock(datetime(2026, 11, 26, 12, 0, tzinfo=BERLIN))
CHAT = "777"
ASKED = "The owner asked to be checked in on 4 times a day: each pulse, ask how they are."
WATCHDOG = 30.0


async def _sent(channel: RecordingChannel, count: int) -> list[str]:
    """The channel's texts once ``count`` have gone out (the outbox sends on its own)."""
    async with asyncio.timeout(WATCHDOG):
        while len(channel.sent) < count:
            channel.delivered.clear()
            await channel.delivered.wait()
    return channel.texts(CHAT)


async def test_check_in_on_me_four_times_a_day_reaches_the_owner(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "ok")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], pulse=True,
        timezone="Europe/Berlin", owner_telegram_ids=[int(CHAT)],
    ) as app:  # fmt: skip
        model.responder = sequence(
            tool_call("manage_pulse", action="update_config", enabled=True, pulses_per_day=4),
            tool_call("manage_pulse", action="update_notes", notes=ASKED),
            "I'll check in 4 times a day.",
        )
        await telegram.say("Check in on me 4 times a day", sender=CHAT)
        await app.pipeline.join()
        [turned_on, notes] = tool_results(model)
        await _sent(telegram, 1)
        asked = len(model.requests)
        model.responder = sequence("How are you?")  # its answer, no send_message
        await parts_of(app).engine.run_pulse_now("manual")
        pulse = model.requests[asked]
        texts = await _sent(telegram, 2)
        shown = await call_tool(app, "manage_pulse", action="get_config")
        await telegram.say("/pulse", sender=CHAT)
        await app.pipeline.join()
        status = (await _sent(telegram, 3))[-1]

    assert turned_on["note"] == CHECKING_IN
    assert turned_on["pulse"]["pulses_per_day"] == 4 and turned_on["pulse"]["check_ins"]
    assert notes["check_ins"] is True
    assert "Your brief says whether your final text is sent to the owner" in pulse.system
    brief = pulse.messages[-1].text
    assert ASKED in brief
    assert CHECK_IN in brief and "only logged" not in brief
    assert texts == ["I'll check in 4 times a day.", "How are you?"]
    assert len(model.requests) == asked + 1
    assert shown["check_ins"] is True
    assert "check-ins: each answer is sent to the owner" in status


async def test_a_pulse_the_owner_never_asked_for_only_logs_its_answer(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "All quiet.")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], pulse=True,
        owner_telegram_ids=[int(CHAT)],
    ) as app:  # fmt: skip
        job = "check on me 4 times a day"
        cron = owner_ctx(app.deps, kind="cron", owner_words=job, job_id="j1")
        by_job = await call_tool(
            app, "manage_pulse", cron, action="update_config", enabled=True, pulses_per_day=4
        )
        outside = owner_ctx(app.deps, owner_words="hi", tally=Tally(untrusted=["web_search"]))
        after_outside = await call_tool(app, "manage_pulse", outside, action="update_notes",
                                        notes="ask how they are")  # fmt: skip
        await parts_of(app).engine.run_pulse_now("manual")
        brief = model.requests[-1].messages[-1].text
        run = await app.deps.db["runs"].find_one({"kind": "pulse"})
        queued = await app.deps.db["outbox"].count_documents({})
        shown = await call_tool(app, "manage_pulse", action="get_config")

    assert by_job["note"] == REACHING and by_job["pulse"]["check_ins"] is False
    assert after_outside["check_ins"] is False and shown["check_ins"] is False
    assert "Your final text is only logged. Reach the owner only with send_message" in brief
    assert CHECK_IN not in brief
    assert run is not None and run["result"] == "All quiet."
    assert queued == 0 and telegram.texts(CHAT) == []


async def test_turning_the_pulse_off_ends_the_check_ins(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    telegram = RecordingChannel(name="telegram")
    model = ScriptedModel(lambda _r: "How are you?")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], pulse=True,
        owner_telegram_ids=[int(CHAT)],
    ) as app:  # fmt: skip
        owner = owner_ctx(app.deps, channel="telegram", chat_id=CHAT, owner_words="check on me")
        on = await call_tool(app, "manage_pulse", owner, action="update_notes", notes=ASKED)
        stop = owner_ctx(app.deps, channel="telegram", chat_id=CHAT, owner_words="stop the pulse")
        off = await call_tool(app, "manage_pulse", stop, action="update_config", enabled=False)
        # On again by a reply to an alert ("resume pulse"): not an ask for check-ins.
        await parts_of(app).pulse.update_config(enabled=True)
        await parts_of(app).engine.run_pulse_now("manual")
        brief = model.requests[-1].messages[-1].text
        queued = await app.deps.db["outbox"].count_documents({})
        shown = await call_tool(app, "manage_pulse", action="get_config")

    assert on["check_ins"] is True
    assert off["pulse"]["enabled"] is False and off["pulse"]["check_ins"] is False
    assert shown["enabled"] is True and shown["check_ins"] is False
    assert CHECK_IN not in brief
    assert queued == 0 and telegram.texts(CHAT) == []


class SendsThenHangs(RecordingChannel):
    """Delivers, then never returns: the process dies before the send is recorded."""

    hang = True

    async def send(self, message: OutboundMessage) -> SendResult:
        result = await super().send(message)
        if self.hang:
            await asyncio.Event().wait()
        return result


@pytest.mark.clock(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
async def test_a_check_in_sent_before_a_crash_is_not_asked_for_or_sent_again(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    model = ScriptedModel(lambda _r: "How are you?")
    telegram = SendsThenHangs(name="telegram")
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], pulse=True,
        owner_telegram_ids=[int(CHAT)],
    ) as app:  # fmt: skip
        pulse = parts_of(app).pulse
        await pulse.owner.update(quiet_hours=[])
        await pulse.update_config(enabled=True, pulses_per_day=48, check_ins=True)
        await pulse.update_notes(ASKED)
        due = (await pulse.get()).next_pulse_at
        assert due is not None
        clock.set(due)
        fires = await parts_of(app).engine.run_due(wait=False)
        async with asyncio.timeout(WATCHDOG):
            await telegram.delivered.wait()
        for fire in fires:  # killed after the check-in went out, before anything was recorded
            assert fire.task is not None
            fire.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fire.task
        telegram.hang = False
        second, runner = build_parts(app, SchedulingOptions(timer=False))
        await second.engine.start(runner)
        try:
            clock.advance(timedelta(seconds=30))  # the first process's lease lapses
            assert [f.action for f in await second.engine.run_due()] == ["retry"]
        finally:
            await second.engine.stop()
        run = await app.deps.db["runs"].find_one({"kind": "pulse"})
        state = await pulse.get()
    assert telegram.texts(CHAT) == ["How are you?"]
    assert len(model.requests) == 1
    assert run is not None and (run["status"], run["attempts"]) == ("success", 2)
    assert state.done_today == 1
