"""The Monitors page on a phone, in a real browser: the cards and their sparklines fit
the screen; a monitor is added from the form, and a delete is asked once more before
it is done."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from tests.agent.app.dashboard.browser_kit import PHONE, Browser
from tests.agent.app.dashboard.conftest import TOKEN
from tests.agent.app.dashboard.test_monitors_page import QUICK
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app
from tests.fakes.monitor_target import Target

WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth]"
BOX = "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, r.width];"


@pytest.fixture
async def dash(app_db: AppDb) -> AsyncIterator[Harness]:
    """The app with the monitors (the package's ``dash`` has the scheduler instead)."""
    async with alert_app(app_db, features=(QUICK,), timezone="Europe/Berlin") as harness:
        yield harness


async def test_a_phone_sees_the_monitors_and_changes_them(browser: Browser, dash: Harness) -> None:
    target = await Target().start()
    try:
        monitors = dash.app.monitors
        assert monitors is not None and monitors.history is not None
        long_url = f"{target.url}?" + "a-very-long-query-without-spaces-" * 6
        web = await monitors.create(
            "http", {"name": "The shop front page", "url": long_url, "interval_seconds": 60}
        )
        for minutes in range(1, 40):
            at = dash.clock.now - timedelta(minutes=minutes)
            await monitors.history.record(web.id, at, minutes != 7, 40 + minutes * 3)
        await browser.phone()
        await browser.log_in(TOKEN)
        await browser.get("/monitors")
        assert await browser.script(WIDTH) == [PHONE[0], PHONE[0]]
        left, right, width = await browser.script(BOX, await browser.find("svg.spark"))
        assert left >= 0 and right <= PHONE[0] and width > 0
        assert "up" in await browser.text(f"#monitor-{web.id} .state-word")

        await browser.click("details summary")
        await browser.type("#create input[name=name]", "Nightly backup")
        await browser.script(
            "document.querySelector('#create select[name=kind]').value = 'heartbeat'"
        )
        await browser.type("#create input[name=period_seconds]", "86400")
        await browser.submit("#create button[type=submit]", "#created")
        assert "/ping/" in await browser.text("#created .ping-url")
        assert await browser.script(WIDTH) == [PHONE[0], PHONE[0]]

        await browser.submit(f"#monitor-{web.id} form[action$='/delete'] button", "h1")
        assert await browser.text("h1") == "Delete “The shop front page”?"
        assert await monitors.repo.reload(web.id) is not None  # asked, not done
        await browser.submit("form[action$='/delete'] button", ".flash")
        assert "Deleted “The shop front page”" in await browser.text(".flash")
        assert await monitors.repo.reload(web.id) is None
    finally:
        await target.stop()
