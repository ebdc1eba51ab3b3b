"""Monitors in the running app: each way a target fails, heartbeats, pings, the API, a
restart in the middle; and never a model call.

The whole app on the test database, with the real alert router (no timer loop), a
recording Telegram chat, fake Twilio, a scripted model that records every request,
and a local HTTP target. Checks run every second (the 30 s minimum is lowered through
the feature's options, as only a test may); the fake clock dates what is stored, so
"down for 3 min" is exact.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pymongo import AsyncMongoClient

from agent.app.features.monitors import MonitoringOptions, monitoring
from agent.tools.db import DB_QUERY
from scheduler.monitors.monitor import MonitorLimits
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, PUBLIC_URL, Harness, alert_app
from tests.fakes.monitor_target import Target
from tests.waiting import until, until_async

AUTH = {"Authorization": f"Bearer {ADMIN}"}
FAST = monitoring(
    MonitoringOptions(
        MonitorLimits(min_interval_seconds=1, timeout_seconds=0.5, review_seconds=0.05)
    )
)
Doc = dict[str, Any]


async def create(h: Harness, **fields: Any) -> Doc:
    resp = await h.client.post("/api/monitors", json=fields, headers=AUTH)
    assert resp.status == 201, await resp.text()
    created: Doc = await resp.json()
    return created


async def stored(h: Harness, monitor_id: str) -> Doc:
    doc = await h.app.deps.db["monitors"].find_one({"_id": monitor_id})
    assert doc is not None
    return doc


async def alerts(h: Harness) -> list[Doc]:
    return await h.app.deps.db["alerts"].find({}).sort("code", 1).to_list(None)


def reached(h: Harness, monitor_id: str, **wanted: Any) -> Any:
    async def check() -> bool:
        doc = await stored(h, monitor_id)
        return all(doc.get(k) == v for k, v in wanted.items())

    return check


def told(h: Harness, text: str) -> bool:
    return any(text in sent for sent in h.chat.texts())


async def test_a_target_that_goes_away_alerts_after_two_failures_and_resolves(
    app_db: AppDb,
) -> None:
    target = await Target().start()
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(h, name="NAS", kind="http", url=target.url, interval_seconds=1)
        assert m["failures_before_alert"] == 2 and m["severity"] == "warning"
        await until_async(reached(h, m["id"], state="up", told="up"), "the first good check")
        await target.stop()
        await until_async(reached(h, m["id"], failures=1), "one failed check")
        assert await alerts(h) == []  # one failure alone stays quiet
        await until_async(
            reached(h, m["id"], state="down", told="down"), "down after the second failure"
        )
        [alert] = await alerts(h)
        assert alert["title"] == "NAS is down" and alert["severity"] == "warning"
        assert alert["source"] == "monitor:NAS" and "request failed" in alert["body"]
        assert (await stored(h, m["id"]))["alert_code"] == alert["code"]
        assert told(h, "NAS is down")
        checked = (await stored(h, m["id"]))["failures"]
        await until_async(reached(h, m["id"], failures=checked + 2), "two more failed checks")
        assert len(await alerts(h)) == 1  # one alert while it stays down
        assert sum("NAS is down" in t for t in h.chat.texts()) == 1

        h.clock.advance(minutes=3)
        await target.start()
        await until_async(reached(h, m["id"], state="up"), "up again")
        h.clock.advance(minutes=2)  # told once 5 min have passed since the last message
        await until_async(reached(h, m["id"], told="up"), "told up again")
        [alert] = await alerts(h)
        assert alert["status"] == "resolved" and alert["resolved_by"] == "monitor:NAS"
        await until(lambda: told(h, "NAS is up again after 3 min (alert #1 resolved)."))
        assert h.model.requests == []
    await target.stop()


async def test_a_target_answering_500_alerts_with_the_status(app_db: AppDb) -> None:
    target = await Target(status=500).start()
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(
            h, name="API", kind="http", url=target.url, interval_seconds=1, severity="critical"
        )
        await until_async(reached(h, m["id"], state="down", told="down"))
        [alert] = await alerts(h)
        assert alert["severity"] == "critical"
        assert "answered HTTP 500; expected 2xx or 3xx" in alert["body"]
        assert len(h.twilio.sent) == 1  # critical: paged by SMS
        assert h.model.requests == []
    await target.stop()


async def test_a_target_that_hangs_fails_at_the_timeout(app_db: AppDb) -> None:
    target = await Target(hang=True).start()
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(
            h, name="Wedged", kind="http", url=target.url, interval_seconds=1,
            failures_before_alert=1,
        )  # fmt: skip
        await until_async(reached(h, m["id"], state="down", told="down"))
        [alert] = await alerts(h)
        assert "no answer within 0.5 s" in alert["body"]
        assert h.model.requests == []
    await target.stop()


async def test_a_wrong_keyword_or_status_is_down(app_db: AppDb) -> None:
    target = await Target(body="maintenance").start()
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(
            h, name="Shop", kind="http", url=target.url, interval_seconds=1, keyword="Welcome",
            failures_before_alert=1,
        )  # fmt: skip
        await until_async(reached(h, m["id"], state="down", told="down"))
        [alert] = await alerts(h)
        assert "answered HTTP 200 without the keyword 'Welcome'" in alert["body"]
        target.body = "Welcome to the shop"
        await until_async(reached(h, m["id"], state="up"))
        teapot = await create(
            h, name="Teapot", kind="http", url=target.url, interval_seconds=1,
            expect_status=418, failures_before_alert=1,
        )  # fmt: skip
        await until_async(reached(h, teapot["id"], state="down", told="down"))
        assert "answered HTTP 200; expected 418" in (await alerts(h))[-1]["body"]
        assert h.model.requests == []
    await target.stop()


async def test_a_heartbeat_that_stops_alerts_once_period_and_grace_pass(
    app_db: AppDb,
) -> None:
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(h, name="Backup", kind="heartbeat", period_seconds=60, grace_seconds=30)
        token = m["ping_url"].rsplit("/", 1)[1]
        assert (await h.client.get(f"/ping/{token}")).status == 200
        await until_async(reached(h, m["id"], state="up", told="up"))
        h.clock.advance(seconds=89)
        assert (await h.client.post(f"/ping/{token}")).status == 200  # in time: counts again
        h.clock.advance(seconds=91)
        await until_async(
            reached(h, m["id"], state="down", told="down"), "down after period + grace"
        )
        [alert] = await alerts(h)
        assert alert["title"] == "Backup is down" and alert["source"] == "monitor:Backup"
        assert "no ping for 1 min (expected every 1 min)" in alert["body"]
        h.clock.advance(minutes=10)
        assert (await h.client.get(f"/ping/{token}")).status == 200
        await until_async(reached(h, m["id"], state="up", told="up"))
        assert (await alerts(h))[0]["status"] == "resolved"
        await until(lambda: told(h, "Backup is up again after 10 min"))
        assert h.model.requests == []


async def test_fail_ping_alerts_at_once_and_unknown_tokens_get_404(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(h, name="Cron", kind="heartbeat", period_seconds=3600)
        token = m["ping_url"].rsplit("/", 1)[1]
        assert (await h.client.get(f"/ping/{token}x")).status == 404
        assert (await h.client.post("/ping/nothing/fail")).status == 404
        resp = await h.client.post(f"/ping/{token}/fail")  # no admin token needed
        assert resp.status == 200 and await resp.text() == "OK"
        [alert] = await alerts(h)
        assert "reported a failure (/fail)" in alert["body"]
        assert (await stored(h, m["id"]))["state"] == "down"
        assert (await h.client.get(f"/ping/{token}/fail")).status == 200
        assert len(await alerts(h)) == 1  # still one while down
        h.clock.advance(minutes=5)  # the next message may go
        assert (await h.client.get(f"/ping/{token}")).status == 200
        assert (await alerts(h))[0]["status"] == "resolved"
        assert h.model.requests == []


async def test_api_creates_lists_and_deletes(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(FAST,)) as h:
        body = {"name": "Job", "kind": "heartbeat", "period_seconds": 3600}
        assert (await h.client.post("/api/monitors", json=body)).status == 401
        beat = await create(h, **body)
        assert beat["id"] and beat["grace_seconds"] == 360 and beat["status"] == "new"
        assert beat["ping_url"].startswith(f"{PUBLIC_URL}/ping/")
        assert len(beat["ping_url"].rsplit("/", 1)[1]) >= 32
        web = await create(h, name="Web", kind="http", url="http://127.0.0.1:9/")
        assert web["interval_seconds"] == 60 and "ping_url" not in web
        listed = await (await h.client.get("/api/monitors", headers=AUTH)).json()
        assert [m["name"] for m in listed["monitors"]] == ["Job", "Web"]
        for wrong, says in (
            ({"name": "X", "kind": "http", "url": "ftp://nas"}, "http:// or https://"),
            ({"name": "X", "kind": "http", "url": "http://a", "interval_seconds": 0}, "between"),
            ({"name": "Web", "kind": "http", "url": "http://a"}, "already a monitor named"),
            ({"name": "X", "kind": "heartbeat"}, "period_seconds is required"),
            ({"name": "X", "kind": "ping"}, "kind is required: http or heartbeat"),
            ({"name": "X", "kind": "http", "url": "http://a", "colour": 1}, "unknown field"),
        ):
            resp = await h.client.post("/api/monitors", json=wrong, headers=AUTH)
            assert resp.status == 400 and says in (await resp.json())["error"], wrong
        assert (await h.client.post("/api/monitors", data="[", headers=AUTH)).status == 400
        resp = await h.client.delete(f"/api/monitors/{beat['id']}", headers=AUTH)
        assert resp.status == 200 and (await resp.json())["deleted"] == beat["id"]
        token = beat["ping_url"].rsplit("/", 1)[1]
        assert (await h.client.get(f"/ping/{token}")).status == 404
        resp = await h.client.delete(f"/api/monitors/{beat['id']}", headers=AUTH)
        assert resp.status == 404 and "no monitor" in (await resp.json())["error"]
        status = await (await h.client.get("/api/status", headers=AUTH)).json()
        assert [m["name"] for m in status["monitors"]] == ["Web"]


async def test_a_restart_keeps_the_down_state_and_raises_no_second_alert(
    app_db: AppDb, mongo_client: AsyncMongoClient[Doc]
) -> None:
    target = await Target(status=503).start()
    name = f"mon_{uuid.uuid4().hex[:10]}"
    async with alert_app(app_db, db_name=name, features=(FAST,)) as h:
        clock = h.clock
        m = await create(
            h, name="Router", kind="http", url=target.url, interval_seconds=1,
            failures_before_alert=1,
        )  # fmt: skip
        beat = await create(h, name="Nightly", kind="heartbeat", period_seconds=60)
        token = beat["ping_url"].rsplit("/", 1)[1]
        assert (await h.client.get(f"/ping/{token}")).status == 200
        await until_async(reached(h, m["id"], state="down", told="down"))
        assert len(await alerts(h)) == 1
    clock.advance(minutes=5)  # the heartbeat's deadline passes while nothing runs
    try:
        async with alert_app(app_db, db_name=name, clock=clock, features=(FAST,)) as h:
            await until_async(
                reached(h, beat["id"], state="down", told="down"), "late, counted from the DB"
            )
            hits = target.hits
            await until(lambda: target.hits >= hits + 2, "checks after the restart")
            got = await alerts(h)
            assert [a["title"] for a in got] == ["Router is down", "Nightly is down"]
            assert "no ping for 5 min" in got[1]["body"]
            assert sum("Router is down" in t for t in h.chat.texts()) == 0  # none again
            target.status = 200
            await until_async(reached(h, m["id"], state="up", told="up"))
            await until(lambda: told(h, "Router is up again after 5 min"))
            assert h.model.requests == []
    finally:
        await mongo_client.drop_database(name)
        await target.stop()


async def test_the_dashboard_overview_lists_the_monitors(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(FAST,)) as h:
        beat = await create(h, name="Nightly <backup>", kind="heartbeat", period_seconds=60)
        await create(h, name="Fine", kind="heartbeat", period_seconds=60)
        token = beat["ping_url"].rsplit("/", 1)[1]
        assert (await h.client.post(f"/ping/{token}/fail")).status == 200
        resp = await h.client.get("/", headers=AUTH)
        assert resp.status == 200
        html = await resp.text()
        section = html[html.index('id="monitors"') :]
        assert 'Nightly &lt;backup&gt;</strong> <span class="badge bad">down</span>' in section
        assert 'Fine</strong> <span class="badge muted">no ping yet</span>' in section
        assert "down since" in section


async def test_a_ping_token_is_shown_once_and_kept_only_as_its_hash(app_db: AppDb) -> None:
    """Issue 36, point 3: the model reads ``monitors`` with ``db_query``; the token that
    lets anyone ping (or ``/fail``) the heartbeat is not there, nor in any later view."""
    async with alert_app(app_db, features=(FAST,)) as h:
        beat = await create(h, name="Backup", kind="heartbeat", period_seconds=3600)
        token = beat["ping_url"].rsplit("/", 1)[1]
        assert "only a hash" in beat["ping_note"]
        ctx = owner_ctx(h.app.deps)
        read = await DB_QUERY.invoke({"operation": "find", "collection": "monitors"}, ctx)
        assert [row["name"] for row in read["rows"]] == ["Backup"]
        raw = await stored(h, beat["id"])
        tools = h.app.catalog.for_context(ctx)
        listed = await tools.call("manage_monitor", {"action": "list"}, ctx)
        pause = {"action": "pause", "monitor_id": "Backup"}
        paused = await tools.call("manage_monitor", pause, ctx)
        seen = [
            json.dumps(read, default=str),
            json.dumps(raw, default=str),
            await (await h.client.get("/api/monitors", headers=AUTH)).text(),
            await (await h.client.get("/api/status", headers=AUTH)).text(),
            json.dumps(listed, default=str),
            json.dumps(paused, default=str),
        ]
        assert [token in text for text in seen] == [False] * len(seen)
        assert "ping_url" not in listed["monitors"][0]
        await tools.call("manage_monitor", {"action": "resume", "monitor_id": "Backup"}, ctx)
        assert (await h.client.get(f"/ping/{token}")).status == 200  # the hash finds it
        await until_async(reached(h, beat["id"], state="up", told="up"))


async def test_without_public_base_url_a_ping_url_is_a_path_never_the_host_header(
    app_db: AppDb,
) -> None:
    """A ``Host`` header is the sender's to choose: it must not become the URL a job
    is told to ping (the job would report its secret to that host)."""
    async with alert_app(app_db, features=(FAST,), public_base_url=None) as h:
        body = {"name": "Job", "kind": "heartbeat", "period_seconds": 3600}
        headers = {**AUTH, "Host": "evil.example", "X-Forwarded-Host": "evil.example"}
        resp = await h.client.post("/api/monitors", json=body, headers=headers)
        made = await resp.json()
        assert resp.status == 201 and made["ping_url"].startswith("/ping/")
        assert "set PUBLIC_BASE_URL" in made["ping_note"]
        ctx = owner_ctx(h.app.deps)
        tools = h.app.catalog.for_context(ctx)
        arguments = {"action": "create", "name": "Other", "kind": "heartbeat"}
        by_tool = await tools.call("manage_monitor", arguments | {"period_seconds": 60}, ctx)
        assert by_tool["created"]["ping_url"].startswith("/ping/")
        assert (await h.client.get(made["ping_url"])).status == 200


async def test_a_flapping_target_makes_one_flapping_alert(app_db: AppDb) -> None:
    """Issue 36, point 10: a target going down and up every half minute sent a message
    for each change (about 120 an hour). Now: the first down, one "flapping" alert
    (held until 5 min after that message), and one message once it is steady again."""
    target = await Target().start()
    async with alert_app(app_db, features=(FAST,)) as h:
        m = await create(
            h, name="Web", kind="http", url=target.url, interval_seconds=1,
            failures_before_alert=1,
        )  # fmt: skip
        await until_async(reached(h, m["id"], state="up"), "the first good check")
        for _ in range(3):  # six changes in three minutes
            target.status = 500
            await until_async(reached(h, m["id"], state="down"))
            h.clock.advance(seconds=30)
            target.status = 200
            await until_async(reached(h, m["id"], state="up"))
            h.clock.advance(seconds=30)
        assert [a["title"] for a in await alerts(h)] == ["Web is down"]
        h.clock.advance(minutes=2)  # 5 min since the first message
        await until_async(reached(h, m["id"], told="flapping"), "told it flaps")
        down, flapping = await alerts(h)
        assert down["status"] == "resolved" and flapping["title"] == "Web is flapping"
        assert "changed state 6 times in 2 min" in flapping["body"]
        h.clock.advance(minutes=15)
        await until_async(reached(h, m["id"], told="up"), "steady again")
        await until(lambda: told(h, "Web is steady and up again after 20 min (alert #2 resolved)"))
        assert [a["status"] for a in await alerts(h)] == ["resolved", "resolved"]
        assert sum("Web is" in text for text in h.chat.texts()) == 3
        assert h.model.requests == []
    await target.stop()
