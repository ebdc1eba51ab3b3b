"""The alerts page's "Send a test page" button (issue 39, item 2): a form behind the
login and its CSRF check that starts the same test page as ``watchkeeper page-test``;
the page then shows it marked as a test, with its steps."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

from agent.alerts.directives import Ack
from agent.app.status import status_data, status_text
from tests.agent.alerts.page_test_kit import finished, has_step
from tests.agent.app.dashboard.test_alert_pages import logged_in, page, section_of_alert
from tests.fakes.alert_app import Harness
from tests.waiting import until_async


async def test_the_button_posts_and_the_page_shows_a_test_page(dash: Harness) -> None:
    csrf = await logged_in(dash)
    html = await page(dash.client, "/alerts")
    form = re.search(r'<form[^>]*action="/alerts/page-test"[^>]*>(.*?)</form>', html, re.S)
    assert form is not None and 'method="post"' in form.group(0)
    assert "Send a test page" in form.group(1) and 'name="csrf"' in form.group(1)

    refused = await dash.client.post("/alerts/page-test", data={}, allow_redirects=False)
    assert refused.status == 403 and await dash.router.store.by_open_key("page-test") is None

    done = await dash.client.post("/alerts/page-test", data={"csrf": csrf})
    assert "Test page #" in await done.text()  # the flash after the redirect
    alert = await dash.router.store.by_open_key("page-test")
    assert alert is not None and alert.test
    await until_async(lambda: has_step(dash, alert.code, "chat sent"), "the chat step")
    card = section_of_alert(await page(dash.client, "/alerts"), alert.code)
    assert "test page" in card and "chat sent: telegram" in card

    again = await dash.client.post("/alerts/page-test", data={"csrf": csrf})
    assert f"test page #{alert.code} is still running" in await again.text()
    await dash.chat.say("ack")
    await finished(dash, alert.code)


async def test_a_running_test_page_is_not_an_unanswered_critical_alert(dash: Harness) -> None:
    """At 3 a.m. a test page the owner started reads as one: the overview's status line
    says it runs (after a real warning, counted as such), the tab title's count
    (``/live/attention``) and notifications leave it out, and ``/status`` counts only
    the real alert."""
    await logged_in(dash)
    real = await dash.router.raise_alert(severity="warning", title="Backups slow")
    alert = await dash.router.page_tests.begin()
    await until_async(lambda: has_step(dash, alert.code, "chat sent"), "the chat step")

    overview = await page(dash.client, "/")
    status = re.search(r'<div id="status".*?</div>', overview, re.S)
    assert status is not None
    assert "critical alert" not in status.group(0)
    assert "1 warning alert not acknowledged" in status.group(0)
    assert f"test page #{alert.code} running" in status.group(0)
    attention = await (await dash.client.get("/live/attention")).json()
    assert attention["critical"] == 0 and attention["alerts"] == []
    words = status_text(await status_data(dash.app), "m", tz=ZoneInfo("UTC"), now=dash.clock())
    assert f"Open alerts: 1 (#{real.code}); test page #{alert.code} running" in words

    await dash.router.apply(alert.code, Ack(), "dashboard")
    await finished(dash, alert.code)
    overview = await page(dash.client, "/")
    assert "test page #" not in overview.split('<div id="status"', 1)[1].split("</div>", 1)[0]
