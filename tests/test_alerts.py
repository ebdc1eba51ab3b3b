"""The alert router end to end: routing, escalation, replies as directives, tools, API.

Offline: a fake Twilio API, a recording chat channel, the test database, and a
manual clock; escalation steps run through ``router.tick()``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agent.alerts.policy import RoutingPolicy
from agent.app.alerts_feature import AlertingOptions, alerting
from agent.app.core import App
from scheduler.jobs import CronService
from tests.contexts import owner_ctx
from tests.fakes.alert_app import ADMIN, OWNER_PHONE, OWNER_TG, alert_app
from tests.fakes.scripted import ScriptedModel, sequence
from tests.fakes.twilio_api import twilio_error

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def _alert(app: App, code: str) -> dict[str, Any]:
    doc = await app.database.db["alerts"].find_one({"code": code})
    assert doc is not None
    return doc


# -- severity routing and escalation ---------------------------------------------------


async def test_critical_pages_again_after_15_minutes_until_acknowledged(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        alert = await h.router.raise_alert(
            severity="critical", title="NAS disk full", body="/volume1 at 99%"
        )
        code = alert["code"]
        assert len(h.twilio.sent) == 1
        first = h.twilio.sent[0]
        assert first.to == OWNER_PHONE and f"#{code}" in first.body and f"{code}a" in first.body
        assert len(h.chat.sent) == 1 and h.chat.sent[0].chat_id == str(OWNER_TG)

        await h.tick(minutes=14)
        assert len(h.twilio.sent) == 1
        await h.tick(minutes=1)
        assert len(h.twilio.sent) == 2 and "not acknowledged" in h.sms[1]

        resp = await h.sms_in("ack")
        assert resp.status == 200
        assert h.sms[-1] == f"#{code} acknowledged, escalation stopped."
        assert h.model.requests == []  # a directive never reaches the model

        for _ in range(4):
            await h.tick(minutes=15)
        assert len(h.twilio.sent) == 3  # two pages and the confirmation, nothing more
        doc = await _alert(h.app, code)
        assert doc["status"] == "acknowledged" and doc["next_escalation_at"] is None
        actions = [(e["by"], e["action"]) for e in doc["history"]]
        assert ("owner via sms", "acknowledged") in actions

        await h.sms_in("ack")
        assert h.sms[-1] == f"#{code} was already acknowledged."


async def test_critical_paging_stops_after_four_sms(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.router.raise_alert(severity="critical", title="Router down")
        for _ in range(8):
            await h.tick(minutes=15)
        assert len(h.twilio.sent) == 4
        assert "Page 4 of 4" in h.sms[-1]


async def test_warning_goes_to_chat_then_sms_after_30_minutes(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        alert = await h.router.raise_alert(severity="warning", title="Backup is late")
        assert len(h.chat.sent) == 1 and h.twilio.sent == []
        await h.tick(minutes=29)
        assert h.twilio.sent == []
        await h.tick(minutes=1)
        assert len(h.twilio.sent) == 1
        assert "Not acknowledged after 30m" in h.sms[0] and f"#{alert['code']}" in h.sms[0]
        await h.tick(minutes=60)
        assert len(h.twilio.sent) == 1  # a warning pages once


async def test_acknowledged_warning_never_pages(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        alert = await h.router.raise_alert(severity="warning", title="Backup is late")
        await h.chat.say("ok")
        await h.settle()
        assert h.chat.texts()[-1] == f"#{alert['code']} acknowledged, escalation stopped."
        await h.tick(minutes=45)
        assert h.twilio.sent == []


async def test_info_goes_to_the_primary_chat_only(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.router.raise_alert(severity="info", title="New firmware available")
        await h.tick(hours=3)
        assert len(h.chat.sent) == 1 and h.twilio.sent == []


async def test_telegram_alert_carries_code_reply_help_and_buttons(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        alert = await h.router.raise_alert(severity="warning", title="Cert expires soon")
        code = alert["code"]
        message = h.chat.sent[0]
        assert f"#{code}" in message.text and "Reply ack, snooze 1h" in message.text
        assert [(b.label, b.data) for b in message.buttons] == [
            ("Ack", f"#{code} ack"),
            ("Snooze 1h", f"#{code} snooze 1h"),
            ("Mute 1d", f"#{code} mute 1d"),
        ]
        await h.chat.say(message.buttons[1].data)  # pressing "Snooze 1h"
        await h.settle()
        assert h.chat.texts()[-1].startswith(f"#{code} snoozed for 1h, until 11:00")


async def test_restart_during_escalation_carries_on(mongo_server: str, tmp_path: Any) -> None:
    name = f"restart_{tmp_path.name[-8:]}"
    async with alert_app(mongo_server, db_name=name) as first:
        clock, twilio = first.clock, first.twilio
        await first.router.raise_alert(severity="critical", title="UPS on battery")
        assert len(first.twilio.sent) == 1
        async with alert_app(mongo_server, db_name=name, clock=clock, twilio=twilio) as second:
            pass  # started and stopped: nothing due yet, nothing sent
        assert len(twilio.sent) == 1
    async with alert_app(mongo_server, db_name=name, clock=clock) as second:
        await second.tick(minutes=15)
        assert len(second.twilio.sent) == 1 and "Page 2 of 4" in second.sms[0]
        await second.sms_in("1a")  # GoAlert-style shorthand
        assert second.sms[-1] == "#1 acknowledged, escalation stopped."
        await second.app.database.client.drop_database(name)


async def test_a_refused_page_goes_to_the_chats_instead(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        refused = twilio_error(400, 21610, "Attempt to send to unsubscribed recipient")
        h.twilio.push(refused, times=2)
        alert = await h.router.raise_alert(severity="critical", title="Freezer warm")
        assert h.twilio.sent == [] and len(h.chat.sent) == 1
        await h.tick(minutes=15)
        assert h.twilio.sent == [] and "Page 2 of 4" in h.chat.texts()[-1]
        doc = await _alert(h.app, alert["code"])
        assert doc["sms_sent"] == 0 and doc["history"][-1]["detail"] == "telegram; sms failed"


async def test_sms_budget_caps_pages_and_tells_the_owner_once(mongo_server: str) -> None:
    async with alert_app(mongo_server, policy=RoutingPolicy(sms_per_hour=3)) as h:
        for n in range(5):
            await h.router.raise_alert(severity="critical", title=f"Sensor {n} offline")
        assert len(h.twilio.sent) == 3
        notices = [t for t in h.chat.texts() if t.startswith("SMS budget reached")]
        assert len(notices) == 1 and "3 per hour" in notices[0] and "#4" in notices[0]
        doc = await _alert(h.app, "5")
        assert "sms budget" in doc["history"][-1]["detail"]
        await h.tick(minutes=61)  # the hour has passed: pages flow again
        assert len(h.twilio.sent) == 6


async def test_quiet_hours_hold_a_warning_but_not_a_critical(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.app.database.db["settings"].insert_one(
            {"_id": "pulse", "quiet_hours": [{"start": "09:30", "end": "11:00"}]}
        )
        warning = await h.router.raise_alert(severity="warning", title="Slow DNS")
        assert h.chat.sent == [] and warning["held"] is True
        critical = await h.router.raise_alert(severity="critical", title="Server on fire")
        assert len(h.twilio.sent) == 1
        assert [f"#{critical['code']}" in t for t in h.chat.texts()] == [True]
        await h.tick(minutes=59)
        assert len(h.chat.sent) == 1
        await h.tick(minutes=1)  # 11:00, quiet hours over
        assert f"#{warning['code']}" in h.chat.texts()[-1]
        doc = await _alert(h.app, warning["code"])
        assert doc["held"] is False and any(e["action"] == "held" for e in doc["history"])


async def test_same_dedupe_key_is_counted_not_resent(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        first = await h.router.raise_alert(
            severity="warning", title="Ping loss", dedupe_key="ping:gw"
        )
        for _ in range(3):
            again = await h.router.raise_alert(
                severity="warning", title="Ping loss", dedupe_key="ping:gw"
            )
            assert again["deduplicated"] is True and again["code"] == first["code"]
        assert len(h.chat.sent) == 1
        assert (await _alert(h.app, first["code"]))["count"] == 4
        worse = await h.router.raise_alert(
            severity="critical", title="Ping loss", dedupe_key="ping:gw"
        )
        assert worse["code"] == first["code"] and worse["severity"] == "critical"
        assert len(h.twilio.sent) == 1 and "Now CRITICAL" in h.chat.texts()[-1]
        await h.router.apply(first["code"], _resolve(), "test")
        fresh = await h.router.raise_alert(
            severity="warning", title="Ping loss", dedupe_key="ping:gw"
        )
        assert fresh["code"] != first["code"] and fresh["deduplicated"] is False


def _resolve() -> Any:
    from agent.alerts.directives import Resolve

    return Resolve()


async def test_failed_primary_chat_falls_over_to_the_next(mongo_server: str) -> None:
    async with alert_app(mongo_server, extra_chats=("console",)) as h:
        h.chat.failing = True
        alert = await h.router.raise_alert(severity="info", title="Update ready")
        console = h.extra_chats[0]
        assert [f"#{alert['code']}" in t for t in console.texts()] == [True]
        outbox = h.app.database.db["outbox"]
        tg = await outbox.find_one({"idempotency_key": f"alert:{alert['code']}:0:telegram"})
        assert tg is not None and tg["status"] == "superseded"


async def test_a_chat_channel_that_says_it_is_down_is_tried_last(mongo_server: str) -> None:
    async with alert_app(mongo_server, extra_chats=("console",)) as h:
        h.chat.connected = False
        alert = await h.router.raise_alert(severity="info", title="Update ready")
        console = h.extra_chats[0]
        assert [f"#{alert['code']}" in t for t in console.texts()] == [True]
        outbox = h.app.database.db["outbox"]
        assert await outbox.find_one({"idempotency_key": {"$regex": "telegram$"}}) is None


# -- replies as directives ----------------------------------------------------------------


async def test_snooze_by_code_while_another_alert_is_newer(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        older = await h.router.raise_alert(severity="warning", title="Older")
        newer = await h.router.raise_alert(severity="warning", title="Newer")
        await h.chat.say(f"#{older['code']} snooze 2h")
        await h.settle()
        assert h.chat.texts()[-1] == f"#{older['code']} snoozed for 2h, until 12:00."
        assert (await _alert(h.app, older["code"]))["status"] == "snoozed"
        assert (await _alert(h.app, newer["code"]))["status"] == "open"
        await h.chat.say("ack")  # no code: the latest alert sent
        await h.settle()
        assert (await _alert(h.app, newer["code"]))["status"] == "acknowledged"
        await h.tick(minutes=30)  # the snoozed one does not page meanwhile
        assert h.twilio.sent == []
        sent = len(h.chat.sent)
        await h.tick(minutes=90)
        assert len(h.chat.sent) == sent + 1 and "Snooze over" in h.chat.texts()[-1]
        assert (await _alert(h.app, older["code"]))["status"] == "open"


async def test_telegram_reply_to_picks_the_alert(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        older = await h.router.raise_alert(severity="info", title="Older")
        await h.router.raise_alert(severity="info", title="Newer")
        outbox = await h.app.database.db["outbox"].find_one(
            {"idempotency_key": f"alert:{older['code']}:0:telegram"}
        )
        assert outbox is not None
        await h.chat.say("resolve", reply_to=outbox["external_ids"][0])
        await h.settle()
        assert h.chat.texts()[-1] == f"#{older['code']} resolved."
        assert (await _alert(h.app, older["code"]))["status"] == "resolved"


async def test_weekly_on_a_cron_raised_alert_reschedules_the_job(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        cron = CronService(h.app.database.db, h.clock, "UTC")
        job = await cron.create(
            name="Backup check", instruction="check", cron_expression="30 7 * * *"
        )
        h.app.deps.cron = cron
        alert = await h.router.raise_alert(
            severity="warning", title="Backup check failed", source=f"cron:{job.id}"
        )
        assert "Job: daily, weekly" in h.chat.sent[0].text
        await h.chat.say("weekly")
        await h.settle()
        assert (await cron.get(job.id)).cron_expression == "30 7 * * 1"
        reply = h.chat.texts()[-1]
        assert reply.startswith(
            f"#{alert['code']}: job “Backup check” now runs every Monday at 07:30"
        )
        await h.chat.say(f"#{alert['code']} pause")
        await h.settle()
        assert (await cron.get(job.id)).enabled is False
        assert h.model.requests == []


async def test_schedule_directives_without_the_scheduler_say_so(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.router.raise_alert(severity="info", title="Job failed", source="cron:abc123")
        await h.chat.say("every 2h")
        await h.settle()
        assert "scheduler is not running" in h.chat.texts()[-1]
        await h.router.raise_alert(severity="info", title="Plain")
        await h.chat.say("daily")
        await h.settle()
        assert "was not raised by a cron job" in h.chat.texts()[-1]


async def test_free_text_reply_reaches_the_model_with_the_alert(mongo_server: str) -> None:
    model = ScriptedModel(sequence("The backup failed because the disk is full."))
    async with alert_app(mongo_server, model=model) as h:
        alert = await h.router.raise_alert(
            severity="warning", title="Nightly backup failed", body="rsync exit 23"
        )
        await h.sms_in("why did it fail? anything I should do?")
        assert len(model.requests) == 1
        system = model.requests[0].system
        assert "## The alert this message is about" in system
        assert f"#{alert['code']}" in system and "rsync exit 23" in system
        assert model.requests[0].messages[-1].text == "why did it fail? anything I should do?"
        assert h.sms[-1] == "The backup failed because the disk is full."


async def test_without_open_alerts_replies_go_to_the_agent(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.chat.say("ok")
        await h.settle()
        assert len(h.model.requests) == 1 and h.chat.texts() == ["agent answer"]
        assert "## The alert" not in h.model.requests[0].system


async def test_reserved_keywords_on_sms_get_no_reply_and_no_model(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.router.raise_alert(severity="critical", title="Pump failure")
        for word in ("STOP", "help", "Start"):
            resp = await h.sms_in(word)
            assert resp.status == 200
        assert len(h.twilio.sent) == 1 and h.model.requests == []


async def test_mute_counts_repeats_and_reports_them_when_it_ends(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
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
        assert (await _alert(h.app, alert["code"]))["status"] == "open"


async def test_unknown_code_and_bad_duration_are_answered(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.router.raise_alert(severity="info", title="Something")
        await h.chat.say("#99 ack")
        await h.chat.say("snooze 0m")
        await h.settle()
        assert h.chat.texts()[-2:] == [
            "There is no alert #99.",
            "Snooze needs a duration from 1m to 30d, not 0m.",
        ]


# -- tools, command, API --------------------------------------------------------------------


async def test_model_raises_and_manages_alerts_through_tools(mongo_server: str) -> None:
    model = ScriptedModel(lambda _r: "")
    model.responder = sequence(
        model.call(
            "raise_alert",
            severity="warning",
            title="Odd login",
            body="from 1.2.3.4",
            dedupe_key="login",
        ),
        "Raised.",
        model.call("manage_alerts", action="list"),
        model.call("manage_alerts", action="snooze", code="#1", duration="90 min"),
        "Snoozed.",
    )
    async with alert_app(mongo_server, model=model) as h:
        ctx_tools = await h.app.agent.respond("watch logins", _ctx(h.app))
        assert ctx_tools.tool_calls == ["raise_alert"]
        doc = await _alert(h.app, "1")
        assert doc["dedupe_key"] == "login" and doc["source"] == "agent"
        await h.app.agent.respond("list and snooze", _ctx(h.app))
        listed = model.requests[3].messages[-1].parts[0]
        assert listed.result["count"] == 1  # type: ignore[union-attr]
        assert (await _alert(h.app, "1"))["status"] == "snoozed"


def _ctx(app: App) -> Any:

    return owner_ctx(app.deps, channel="console", chat_id="owner")


async def test_alerts_command_lists_open_alerts(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        await h.chat.say("/alerts")
        await h.settle()
        assert h.chat.texts()[-1] == "No open alerts."
        await h.router.raise_alert(severity="warning", title="Fan noisy", dedupe_key="fan")
        await h.router.raise_alert(severity="warning", title="Fan noisy", dedupe_key="fan")
        h.clock.advance(minutes=5)
        await h.chat.say("/alerts")
        await h.settle()
        text = h.chat.texts()[-1]
        assert "#1 WARNING Fan noisy (seen 2 times) - open, raised 5m ago" in text


async def test_api_raises_alerts_and_status_lists_them(mongo_server: str) -> None:
    async with alert_app(mongo_server) as h:
        body = {"severity": "critical", "title": "Grafana: API 5xx", "body": "rate 12%"}
        assert (await h.client.post("/api/alerts", json=body)).status == 401
        resp = await h.client.post("/api/alerts", json=body | {"source": "grafana"}, headers=AUTH)
        assert resp.status == 201
        created = await resp.json()
        assert created["code"] == "1" and created["source"] == "grafana"
        assert len(h.twilio.sent) == 1
        bad = await h.client.post(
            "/api/alerts", json={"severity": "urgent", "title": "x"}, headers=AUTH
        )
        assert bad.status == 400
        assert "severity must be one of info, warning, critical" in (await bad.json())["error"]
        empty = await h.client.post("/api/alerts", json={"severity": "info"}, headers=AUTH)
        assert (await empty.json())["error"] == "title is required"
        junk = await h.client.post("/api/alerts", data="nope", headers=AUTH)
        assert junk.status == 400
        again = body | {"dedupe_key": "g5xx"}
        await h.client.post("/api/alerts", json=again, headers=AUTH)
        dup = await h.client.post("/api/alerts", json=again, headers=AUTH)
        assert dup.status == 200 and (await dup.json())["deduplicated"] is True
        status = await (await h.client.get("/api/status", headers=AUTH)).json()
        assert [a["code"] for a in status["alerts"]] == ["2", "1"]


async def test_default_policy_can_be_tuned_in_settings(mongo_server: str) -> None:
    from agent.alerts.policy import load_policy

    async with alert_app(mongo_server) as h:
        db = h.app.database.db
        await db["settings"].insert_one(
            {"_id": "alert_routing", "warning_sms_after_minutes": 10, "sms_per_hour": "x"}
        )
        policy = await load_policy(db)
        assert policy.warning_sms_after == timedelta(minutes=10) and policy.sms_per_hour == 10


async def test_feature_without_twilio_settings_has_no_sms(mongo_server: str) -> None:
    async with alert_app(
        mongo_server, twilio_account_sid=None, twilio_auth_token=None, twilio_from_number=None
    ) as h:
        assert "sms" not in h.app.channels
        await h.router.raise_alert(severity="critical", title="No SMS here")
        assert len(h.chat.sent) == 1 and h.twilio.sent == []
        await h.tick(minutes=15)  # a page that cannot go by SMS goes to every chat
        assert len(h.chat.sent) == 2 and "Page 2 of 4" in h.chat.texts()[-1]
        assert alerting(AlertingOptions()) is not None


async def test_with_the_scheduler_a_failing_job_alert_takes_schedule_replies(
    mongo_server: str,
) -> None:
    from agent.app.scheduling_feature import SchedulingOptions, scheduling

    feature = scheduling(SchedulingOptions(timer=False))
    async with alert_app(mongo_server, features=(feature,)) as h:
        parts = h.app.scheduling
        assert parts is not None
        job = await parts.jobs.create(
            name="Report", instruction="send the report", cron_expression="0 8 * * *"
        )
        await parts.runner.warn_owner(
            "Cron job “Report” failed 2 times in a row",
            "Last run: failed.",
            dedupe_key=f"run-failures:cron:{job.id}",
            source=f"cron:{job.id}",
        )
        assert "failed 2 times" in h.chat.texts()[-1]
        await h.chat.say("every 2h")
        await h.chat.say("pause pulse")
        await h.chat.say("pulse 6 per day")
        await h.settle()
        assert (await parts.jobs.get(job.id)).cron_expression == "0 */2 * * *"
        assert "now runs every 2 hours at minute 0" in h.chat.texts()[-3]
        state = await parts.pulse.get()
        assert state.enabled is False and state.pulses_per_day == 6
        assert h.chat.texts()[-1] == "Pulse now runs 6 times per day."
        assert h.model.requests == []
