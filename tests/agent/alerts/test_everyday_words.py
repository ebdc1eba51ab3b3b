"""Issue 32, item 1: everyday words ("resume", "weekly", "ok") act on an alert only
where they plainly answer it (a reply to it, or soon after it with nothing sent to the
owner since), never on one already acknowledged or resolved; otherwise the model gets
them, with the alert as context. The two probes of the issue, as they happened first.

Offline: the alert app (fake Twilio, a recording Telegram chat, a manual clock) with
the scheduler's services and no timer; the model is scripted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from agent.alerts.directives import REPLY_WORDS_NOTE
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.llm.types import ModelMessage
from scheduler.cron.job import CronJob
from scheduler.cron.service import CronService
from tests.agent.alerts.alert_kit import _alert
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app
from tests.fakes.scripted import Request, ScriptedModel

NAS = "0 */6 * * *"


def said(request: Request) -> str:
    """The owner's newest words (a note the prompt appends after them is ignored)."""
    users = [m for m in request.messages if m.role == "user"]
    return users[-1].text if users else ""


def answers(table: dict[str, str]) -> Callable[[Request], ModelMessage | str]:
    """The model answers by the owner's newest words; anything else: "agent answer"."""

    def respond(request: Request) -> ModelMessage | str:
        words = said(request)
        for start, answer in table.items():
            if words.startswith(start):
                return answer
        return "agent answer"

    return respond


@asynccontextmanager
async def sitting(
    app_db: AppDb, model: ScriptedModel | None = None
) -> AsyncIterator[tuple[Harness, CronService]]:
    """The alert app with the scheduler's services (no timer)."""
    scheduler = scheduling(SchedulingOptions(timer=False))
    async with alert_app(app_db, model=model, features=(scheduler,)) as h:
        cron = h.app.deps.cron
        assert cron is not None
        yield h, cron


async def nas_alert(h: Harness, cron: CronService) -> tuple[CronJob, str]:
    """Alert #2, raised by the cron job "NAS disk space check" (#1 is another one)."""
    job = await cron.create(name="NAS disk space check", instruction="df -h", cron_expression=NAS)
    await h.router.raise_alert(severity="info", title="Certificate expires in 20 days")
    alert = await h.router.raise_alert(
        severity="warning", title="NAS disk 91% full", source=f"cron:{job.id}"
    )
    assert alert.code == "2"
    return job, "2"


async def say(h: Harness, text: str, reply_to: str | None = None) -> str:
    await h.chat.say(text, reply_to=reply_to)
    await h.settle()
    return h.chat.texts()[-1]


async def alert_message_id(h: Harness, code: str) -> str:
    doc = await h.app.database.db["outbox"].find_one(
        {"idempotency_key": f"alert:{code}:0:telegram"}
    )
    assert doc is not None
    return str(doc["external_ids"][0])


async def unchanged(cron: CronService, job: CronJob) -> bool:
    now = await cron.get(job.id)
    return now.enabled and now.cron_expression == NAS


# -- the probes of the issue, as they happened -----------------------------------------------
async def test_resume_after_the_agent_suggested_it_goes_to_the_model(app_db: AppDb) -> None:
    """#2 (the NAS job's) acknowledged 15 min ago; the agent says 'Say "resume"' about
    the paused reminder Call Bob; "resume" reaches the model, which resumes Call Bob."""
    model = ScriptedModel(lambda _r: "agent answer")
    async with sitting(app_db, model) as (h, cron):
        nas, code = await nas_alert(h, cron)
        bob = await cron.create(
            name="Call Bob", instruction="remind me to call Bob", cron_expression="0 18 * * 3"
        )
        await cron.update(bob.id, enabled=False)
        assert await say(h, "ack") == f"#{code} acknowledged, escalation stopped."
        h.clock.advance(minutes=14)

        def respond(request: Request) -> ModelMessage | str:
            last = request.messages[-1]
            if last.role == "tool":
                return "Call Bob is back on: Wednesdays at 18:00."
            if said(request).startswith("resume"):
                return model.call("manage_cronjob", action="toggle", job_id=bob.id, enabled=True)
            return 'Call Bob is paused. Say "resume" to turn it back on.'

        model.responder = respond
        await say(h, "anything paused?")
        h.clock.advance(minutes=1)
        reply = await say(h, "resume")
        assert reply == "Call Bob is back on: Wednesdays at 18:00."
        assert (await cron.get(bob.id)).enabled is True
        assert await unchanged(cron, nas)
        assert not any("NAS disk space check" in text for text in h.chat.texts())
        assert said(model.requests[-2]).startswith("resume")


async def test_weekly_after_the_agent_asked_daily_or_weekly_goes_to_the_model(
    app_db: AppDb,
) -> None:
    model = ScriptedModel(
        answers(
            {
                "remind me to water": "Daily or weekly?",
                "weekly": "Done: watering the plants every Sunday at 10:00.",
            }
        )
    )
    async with sitting(app_db, model) as (h, cron):
        nas, _code = await nas_alert(h, cron)
        await say(h, "ack")
        h.clock.advance(minutes=10)
        assert await say(h, "remind me to water the plants") == "Daily or weekly?"
        assert await say(h, "weekly") == "Done: watering the plants every Sunday at 10:00."
        assert await unchanged(cron, nas)
        assert said(model.requests[-1]).startswith("weekly")


# -- where the words do act ------------------------------------------------------------------
async def test_weekly_right_after_the_alert_still_changes_its_job(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, cron):
        nas, code = await nas_alert(h, cron)
        h.clock.advance(minutes=20)  # within the 30-minute window, nothing sent since
        reply = await say(h, "weekly")
        assert reply.startswith(
            f"#{code}: job “NAS disk space check” now runs every Monday at 09:00"
        )
        assert (await cron.get(nas.id)).cron_expression == "0 9 * * 1"
        assert h.model.requests == []


async def test_a_reply_to_the_alert_acts_after_the_window_and_after_a_chat(
    app_db: AppDb,
) -> None:
    async with sitting(app_db) as (h, cron):
        nas, code = await nas_alert(h, cron)
        await say(h, "how are you?")
        h.clock.advance(hours=3)
        reply = await say(h, "pause", reply_to=await alert_message_id(h, code))
        assert reply.startswith(f"#{code}: job “NAS disk space check” paused")
        assert (await cron.get(nas.id)).enabled is False
        assert len(h.model.requests) == 1


async def test_the_code_always_names_the_alert(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, cron):
        nas, code = await nas_alert(h, cron)
        await say(h, "ack")
        await say(h, "how are you?")
        h.clock.advance(days=2)
        assert (await say(h, f"#{code} daily")).startswith(f"#{code}: job “NAS disk space check”")
        assert (await cron.get(nas.id)).cron_expression == "0 9 * * *"


# -- where they do not -----------------------------------------------------------------------
async def test_weekly_after_the_window_goes_to_the_model(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, cron):
        nas, code = await nas_alert(h, cron)
        h.clock.advance(minutes=31)
        assert await say(h, "weekly") == "agent answer"
        assert await unchanged(cron, nas)
        system = h.model.requests[0].read
        assert f"## The alert this message is about\n#{code} [" in system
        assert f"Raised by cron job {nas.id}: manage_cronjob changes its schedule." in system


async def test_an_acknowledged_alert_is_not_answered_even_by_a_reply(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, cron):
        nas, code = await nas_alert(h, cron)
        await say(h, f"#{code} ack")
        assert await say(h, "every 2h", reply_to=await alert_message_id(h, code)) == (
            "agent answer"
        )
        assert await unchanged(cron, nas)
        assert f"The owner replied to the message that carried #{code}" in (
            h.model.requests[0].read
        )


async def test_a_message_to_the_owner_on_another_channel_ends_the_window(
    app_db: AppDb,
) -> None:
    """Critical: the alert goes by Telegram and SMS; the agent then answers an SMS
    question. "weekly" on Telegram answers the agent, not the alert."""
    async with sitting(app_db) as (h, cron):
        job = await cron.create(name="Pump check", instruction="check", cron_expression=NAS)
        await h.router.raise_alert(severity="critical", title="Pump", source=f"cron:{job.id}")
        assert len(h.sms) == 1
        await h.sms_in("what is on today?")
        assert h.sms[-1] == "agent answer"
        assert await say(h, "weekly") == "agent answer"
        assert (await cron.get(job.id)).cron_expression == NAS


async def test_ok_after_the_agent_asked_leaves_the_alert_open(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, cron):
        _nas, code = await nas_alert(h, cron)
        await say(h, "shall I book the table?")
        assert await say(h, "ok") == "agent answer"
        assert await say(h, "done") == "agent answer"
        assert (await _alert(h.app, code))["status"] == "open"
        assert await say(h, "ack") == f"#{code} acknowledged, escalation stopped."


async def test_make_this_weekly_for_an_alert_without_a_job_asks_the_model(
    app_db: AppDb,
) -> None:
    async with sitting(app_db) as (h, _cron):
        alert = await h.router.raise_alert(severity="info", title="Plants look dry")
        assert await say(h, "make this weekly") == "agent answer"
        assert "no schedule to change" not in " ".join(h.chat.texts())
        system = h.model.requests[0].read
        assert f"## The alert this message is about\n#{alert.code} [" in system


async def test_the_model_is_told_which_words_are_read_as_replies(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, _cron):
        await say(h, "hi")
        system = h.model.requests[0].read
        assert REPLY_WORDS_NOTE in system and "## The alert" not in system
        for word in ("ok", "done", "weekly", "daily", "pause", "resume", "every 2h", "at 07:30"):
            assert word in REPLY_WORDS_NOTE


async def test_done_closes_an_acknowledged_alert_it_replies_to_but_ok_asks(
    app_db: AppDb,
) -> None:
    async with sitting(app_db) as (h, cron):
        _nas, code = await nas_alert(h, cron)
        await say(h, "ack")
        message = await alert_message_id(h, code)
        assert await say(h, "ok", reply_to=message) == "agent answer"  # acked already
        assert (await _alert(h.app, code))["status"] == "acknowledged"
        assert await say(h, "done", reply_to=message) == f"#{code} resolved."
        assert await say(h, "fixed", reply_to=message) == "agent answer"
        assert len(h.model.requests) == 2


async def test_pulse_words_after_the_window_go_to_the_model(app_db: AppDb) -> None:
    async with sitting(app_db) as (h, cron):
        await nas_alert(h, cron)
        pulse = h.app.scheduling.pulse if h.app.scheduling else None
        assert pulse is not None
        before = await pulse.get()
        h.clock.advance(minutes=31)
        assert await say(h, "pause pulse") == "agent answer"
        after = await pulse.get()
        assert (after.enabled, after.pulses_per_day) == (before.enabled, before.pulses_per_day)
        # Right after an alert, as a plain answer to it, the same words act.
        await h.router.raise_alert(severity="warning", title="Backup late")
        assert "paused" in (await say(h, "pause pulse")).lower()
        assert (await pulse.get()).enabled is False
