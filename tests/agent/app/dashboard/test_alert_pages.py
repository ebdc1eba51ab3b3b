"""The Overview and Alerts pages: what they show, and the alert buttons going through the
same code as a chat reply (``by: dashboard``). Over HTTP; the browser tests press Ack."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from channels.types import InboundMessage
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import OWNER_TG, Harness

BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def page(client: TestClient[Any, Any], path: str) -> str:
    resp = await client.get(path)
    assert resp.status == 200, path
    return await resp.text()


async def logged_in(dash: Harness) -> str:
    """Log the harness client in; returns the CSRF token of its session."""
    await dash.client.post("/login", data={"token": TOKEN}, allow_redirects=False)
    found = re.search(r'name="csrf" value="([^"]+)"', await page(dash.client, "/"))
    assert found
    return found.group(1)


def section(html: str, section_id: str) -> str:
    start = html.index(f'id="{section_id}"')
    return html[start : html.index("</section>", start)]


async def press_button(dash: Harness, code: str) -> None:
    """A Telegram inline button, as the channel turns a callback query into a message."""
    sink = dash.chat.sink
    assert sink is not None
    await sink(
        InboundMessage(
            channel="telegram",
            external_id=f"cb-{code}",
            chat_id=str(OWNER_TG),
            sender_id=str(OWNER_TG),
            text=f"a:ack:{code}",  # the Ack button's data
            received_at=dash.clock(),
            reply_to="1",
            meta={"kind": "button", "callback_query_id": f"q{code}", "shown": None},
        )
    )
    await dash.settle()


async def test_alerts_page_shows_each_step_and_who_acted_how(dash: Harness) -> None:
    by_sms = (await dash.router.raise_alert(severity="warning", title="Disk full")).code
    by_button = (await dash.router.raise_alert(severity="warning", title="Cert expires")).code
    by_dash = (await dash.router.raise_alert(severity="info", title="New login")).code
    ignored = (await dash.router.raise_alert(severity="critical", title="Site down")).code
    assert (await dash.sms_in(f"{by_sms} ack")).status == 200
    await press_button(dash, by_button)
    csrf = await logged_in(dash)
    done = await dash.client.post(
        f"/alerts/{by_dash}/resolve", data={"csrf": csrf, "next": "/alerts"}
    )
    assert f"#{by_dash} resolved." in await done.text()  # the flash after the redirect
    await dash.tick(minutes=16)  # the critical one is paged again by SMS

    html = await page(dash.client, "/alerts")
    assert "acknowledged" in section_of_alert(html, by_sms) and "via SMS reply" in html
    assert "via Telegram button" in section_of_alert(html, by_button)
    assert "resolved" in section_of_alert(html, by_dash) and "via dashboard" in html
    critical = section_of_alert(html, ignored)
    assert critical.count("<li>") >= 3  # raised, sent, escalated: every step
    assert "escalated" in critical and "escalated: SMS" in critical
    assert '<span class="muted">— Watchkeeper</span>' in critical  # sent and escalated by itself
    assert "— router" not in html  # not the name of a part of the code
    stored = await dash.router.store.by_code(by_button)
    assert stored is not None and stored.acknowledged_by == "owner via telegram button"


def section_of_alert(html: str, code: str) -> str:
    start = html.index(f'id="alert-{code}"')
    end = html.find('<li class="alert"', start + 1)
    return html[start : end if end != -1 else len(html)]


async def test_snooze_goes_through_the_reply_code(dash: Harness) -> None:
    code = (await dash.router.raise_alert(severity="warning", title="Disk full")).code
    csrf = await logged_in(dash)
    resp = await dash.client.post(f"/alerts/{code}/snooze", data={"csrf": csrf})
    assert f"#{code} snoozed for 1h" in await resp.text()
    stored = await dash.router.store.by_code(code)
    assert stored is not None and stored.status == "snoozed"
    assert stored.history[-1].to_doc() | {"at": None} == {
        "at": None,
        "by": "dashboard",
        "action": "snoozed",
        "detail": "1h",
    }
    await dash.client.post(f"/alerts/{code}/ack", data={"csrf": csrf})
    again = await dash.client.post(f"/alerts/{code}/ack", data={"csrf": csrf})
    assert f"#{code} was already acknowledged." in await again.text()
    missing = await dash.client.post("/alerts/999/ack", data={"csrf": csrf})
    assert "There is no alert #999." in await missing.text()
    unknown = await dash.client.post(f"/alerts/{code}/delete", data={"csrf": csrf})
    assert unknown.status == 404


async def test_overview_shows_channels_pulse_fires_and_open_alerts(dash: Harness) -> None:
    cron = dash.app.deps.cron
    assert cron is not None
    await cron.create(name="Morning digest", instruction="Summarise", cron_expression="0 9 * * *")
    paused = await cron.create(name="Paused one", instruction="x", cron_expression="0 8 * * *")
    await cron.toggle(paused.id, False)
    await dash.router.raise_alert(severity="warning", title="Disk full", body="<b>90%</b>")
    closed = await dash.router.raise_alert(severity="info", title="Old news")
    await dash.router.store.change(closed.alert.id, set_={"status": "resolved"})

    html = await (await dash.client.get("/", headers=BEARER)).text()
    health = section(html, "health")
    assert 'data-part="Telegram"' in health and 'data-part="SMS"' in health and ">up<" in health
    pulse = section(html, "pulse")
    assert ">on<" in pulse and "Quiet hours: 22:00–07:00" in pulse
    assert "Done today: 0" in pulse and "(slots so far 07:00, 08:15, 09:30)" in pulse
    assert "Left today: 9 — 10:45, 12:00," in pulse  # 10:00 now, 12 a day from 07:00
    fires = section(html, "next-fires")
    assert "Morning digest" in fires and "Paused one" not in fires
    alerts = section(html, "open-alerts")
    assert "Disk full" in alerts and "Old news" not in alerts
    assert "&lt;b&gt;90%&lt;/b&gt;" in alerts  # escaped, never markup
    assert alerts.count("<button") == 3
