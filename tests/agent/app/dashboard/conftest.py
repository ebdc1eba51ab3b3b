"""Dashboard fixtures: the whole app (alerts + scheduling, fake clock, fake Twilio) served
on 127.0.0.1, and one headless Chromium per test module.

``dash`` is the app (``tests.fakes.alert_app.Harness``: ``dash.client`` is an aiohttp
test client on the real server, ``dash.router`` the alert router, ``dash.app.scheduling``
the scheduler's parts); ``browser`` is a ``Browser`` pointed at that server, logged out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agent.app.features.scheduling import SchedulingOptions, scheduling
from tests.agent.app.dashboard.browser_kit import MISSING, Browser, start_driver
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, Harness, alert_app

TOKEN = ADMIN


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line, not one per test, when the browser tests were skipped for want of it."""
    skipped = terminalreporter.stats.get("skipped", [])
    if any(MISSING in str(getattr(report, "longrepr", "")) for report in skipped):
        terminalreporter.write_line(MISSING)


@pytest.fixture
async def dash(app_db: AppDb) -> AsyncIterator[Harness]:
    feature = scheduling(SchedulingOptions(timer=False))
    async with alert_app(app_db, features=(feature,)) as harness:
        yield harness


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    chrome = start_driver()
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
async def browser(driver: Any, dash: Harness) -> AsyncIterator[Browser]:
    chrome = Browser(driver, str(dash.client.make_url("")).rstrip("/"))
    await chrome.reset()
    yield chrome
