"""Replies about alerts, end to end: directives by code, reply-to and latest alert,
schedule directives, and free text that reaches the model with the alert.

Offline: a fake Twilio API, a recording chat channel, the test database, and a
manual clock; escalation steps run through ``router.tick()``.
"""

from __future__ import annotations

from agent.app.features.scheduling import SchedulingOptions, scheduling
from tests.agent.alerts.alert_kit import _alert
from tests.databases import AppDb
from tests.fakes.alert_app import alert_app
from tests.fakes.scripted import ScriptedModel, sequence


# -- replies as directives ----------------------------------------------------------------
async def test_snooze_by_code_while_another_alert_is_newer(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        older = await h.router.raise_alert(severity="warning", title="Older")
        newer = await h.router.raise_alert(severity="warning", title="Newer")
        await h.chat.say(f"#{older.code} snooze 2h")
        await h.settle()
        assert h.chat.texts()[-1] == f"#{older.code} snoozed for 2h, until 12:00."
        assert (await _alert(h.app, older.code))["status"] == "snoozed"
        assert (await _alert(h.app, newer.code))["status"] == "open"
        await h.chat.say("ack")  # no code: the latest alert sent
        await h.settle()
        assert (await _alert(h.app, newer.code))["status"] == "acknowledged"
        await h.tick(minutes=30)  # the snoozed one does not page meanwhile
        assert h.twilio.sent == []
        sent = len(h.chat.sent)
        await h.tick(minutes=90)
        assert len(h.chat.sent) == sent + 1 and "Snooze over" in h.chat.texts()[-1]
        assert (await _alert(h.app, older.code))["status"] == "open"


async def test_telegram_reply_to_picks_the_alert(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        older = await h.router.raise_alert(severity="info", title="Older")
        await h.router.raise_alert(severity="info", title="Newer")
        outbox = await h.app.database.db["outbox"].find_one(
            {"idempotency_key": f"alert:{older.code}:0:telegram"}
        )
        assert outbox is not None
        await h.chat.say("resolve", reply_to=outbox["external_ids"][0])
        await h.settle()
        assert h.chat.texts()[-1] == f"#{older.code} resolved."
        assert (await _alert(h.app, older.code))["status"] == "resolved"


async def test_weekly_on_a_cron_raised_alert_reschedules_the_job(app_db: AppDb) -> None:
    scheduler = scheduling(SchedulingOptions(timer=False))
    async with alert_app(app_db, features=(scheduler,)) as h:
        cron = h.app.deps.cron
        assert cron is not None
        job = await cron.create(
            name="Backup check", instruction="check", cron_expression="30 7 * * *"
        )
        alert = await h.router.raise_alert(
            severity="warning", title="Backup check failed", source=f"cron:{job.id}"
        )
        assert "Job: daily, weekly" in h.chat.sent[0].text
        await h.chat.say("weekly")
        await h.settle()
        assert (await cron.get(job.id)).cron_expression == "30 7 * * 1"
        reply = h.chat.texts()[-1]
        assert reply.startswith(f"#{alert.code}: job “Backup check” now runs every Monday at 07:30")
        await h.chat.say(f"#{alert.code} pause")
        await h.settle()
        assert (await cron.get(job.id)).enabled is False
        assert h.model.requests == []


async def test_schedule_directives_without_the_scheduler_say_so(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="info", title="Job failed", source="cron:abc123")
        await h.chat.say("every 2h")
        await h.settle()
        assert "scheduler is not running" in h.chat.texts()[-1]
        await h.router.raise_alert(severity="info", title="Plain")
        await h.chat.say("daily")  # no job behind it: the model asks what is meant
        await h.settle()
        assert h.chat.texts()[-1] == "agent answer"
        assert "## The alert this message is about\n#2 [" in h.model.requests[-1].read
        # It changes with the message, so it rides in the note, not the cached system prompt.
        assert "## The alert this message is about" not in h.model.requests[-1].system


async def test_free_text_reply_reaches_the_model_with_the_alert(app_db: AppDb) -> None:
    model = ScriptedModel(sequence("The backup failed because the disk is full."))
    async with alert_app(app_db, model=model) as h:
        alert = await h.router.raise_alert(
            severity="warning", title="Nightly backup failed", body="rsync exit 23"
        )
        await h.sms_in("why did it fail? anything I should do?")
        assert len(model.requests) == 1
        system = model.requests[0].read
        assert "## The alert this message is about" in system
        assert f"#{alert.code}" in system and "rsync exit 23" in system
        assert model.requests[0].messages[-1].text == "why did it fail? anything I should do?"
        assert h.sms[-1] == "The backup failed because the disk is full."


async def test_without_open_alerts_replies_go_to_the_agent(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.chat.say("ok")
        await h.settle()
        assert len(h.model.requests) == 1 and h.chat.texts() == ["agent answer"]
        assert "## The alert" not in h.model.requests[0].read


async def test_reserved_keywords_on_sms_get_no_reply_and_no_model(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="critical", title="Pump failure")
        for word in ("STOP", "help", "Start"):
            resp = await h.sms_in(word)
            assert resp.status == 200
        assert len(h.twilio.sent) == 1 and h.model.requests == []


async def test_mute_counts_repeats_and_reports_them_when_it_ends(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        alert = await h.router.raise_alert(severity="warning", title="Flappy", dedupe_key="flap")
        await h.chat.say("mute 1d")
        await h.settle()
        assert "muted for 1d" in h.chat.texts()[-1]
        for _ in range(3):
            await h.router.raise_alert(severity="warning", title="Flappy", dedupe_key="flap")
        await h.tick(hours=2)
        assert len(h.chat.sent) == 2 and h.twilio.sent == []
        await h.tick(hours=22)
        assert "Mute over; it happened 3 more times" in h.chat.texts()[-1]
        assert (await _alert(h.app, alert.code))["status"] == "open"


async def test_unknown_code_and_bad_duration_are_answered(app_db: AppDb) -> None:
    async with alert_app(app_db) as h:
        await h.router.raise_alert(severity="info", title="Something")
        await h.chat.say("#99 ack")
        await h.chat.say("snooze 0m")
        await h.settle()
        assert h.chat.texts()[-2:] == [
            "There is no alert #99.",
            "Snooze needs a duration from 1m to 30d, not 0m.",
        ]
