"""The owner's glance in a real browser, at a desktop's 1280x800 and a phone's 390x844:
the status line first, alerts worst first then newest, a new alert arriving without a
reload, no raw ISO time in what a page shows, and no sideways scrolling on a phone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from scheduler.monitors.monitor import MonitorLimits
from scheduler.monitors.store import MonitorStore
from storage.repos.monitors import MonitorRepo
from tests.agent.app.dashboard.browser_kit import PHONE, Browser
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness
from tests.scheduling_kit import parts_of

SIZES = {"desktop": (1280, 800, False), "phone": (PHONE[0], PHONE[1], True)}
PAGES = ("/", "/runs", "/alerts", "/jobs", "/spend")
WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth]"
ISO = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}(:\d{2})?(Z|[+-]\d{2}:?\d{2})|T\d{2}:\d{2}")
"""A date or time as ISO 8601 writes it (``2026-11-27``, ``07:55+00:00``, ``T07:55``)."""
SEVERITIES = "return [...document.querySelectorAll(arguments[0])].map(e => e.dataset.severity)"
LIVE_SECONDS = "1"
"""The poll interval the tests give a page (``data-every``; 15 s on a real one)."""


async def screen(browser: Browser, size: str) -> None:
    width, height, mobile = SIZES[size]
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}
    await browser.call(
        browser.driver.execute_cdp_cmd, "Emulation.setDeviceMetricsOverride", metrics
    )


async def poll_fast(browser: Browser) -> None:
    """Shorten the page's poll interval, and mark the document: a reload would lose it."""
    await browser.script(
        "document.querySelector('[data-live]').dataset.every = arguments[0];"
        "window.wkSamePage = true;",
        LIVE_SECONDS,
    )


async def same_page(browser: Browser) -> bool:
    return bool(await browser.script("return window.wkSamePage === true"))


async def raise_in_order(dash: Harness) -> dict[str, str]:
    """Four alerts a minute apart: info first, then critical, then two warnings."""
    codes = {}
    for key, severity, title in (
        ("info", "info", "Backup finished late"),
        ("critical", "critical", "Site down"),
        ("warning_old", "warning", "Disk 85% full"),
        ("warning_new", "warning", "Certificate expires in 5 days"),
    ):
        dash.clock.advance(minutes=1)
        codes[key] = str((await dash.router.raise_alert(severity=severity, title=title)).code)
    return codes


@pytest.mark.parametrize("size", sorted(SIZES))
async def test_status_line_then_alerts_worst_first(
    browser: Browser, dash: Harness, size: str
) -> None:
    await screen(browser, size)
    await browser.log_in(TOKEN)
    assert (await browser.path()) == "/"
    assert (await browser.text("#status .headline")) == "All clear"

    codes = await raise_in_order(dash)
    await browser.get("/")
    assert (await browser.text("#status .headline")) == "1 critical alert not acknowledged"
    assert "2 warning alerts not acknowledged" in await browser.text("#status")
    top = await browser.script(
        "return document.querySelector('main').firstElementChild.nextElementSibling"
        ".querySelector('#status') !== null"
    )
    assert top, "the status line leads the page"
    cards = "#open-alerts li.alert"
    assert await browser.script(SEVERITIES, cards) == ["critical", "warning", "warning", "info"]
    ids = [await browser.call(e.get_attribute, "id") for e in await browser.find_all(cards)]
    assert ids[1:3] == [f"alert-{codes['warning_new']}", f"alert-{codes['warning_old']}"]
    critical = f"#alert-{codes['critical']}"
    assert (await browser.text(f"{critical} .sev")).lower() == "critical"
    colours = """
    const s = getComputedStyle(document.querySelector(arguments[0]));
    const o = getComputedStyle(document.querySelector(arguments[1]));
    return [s.backgroundColor, o.backgroundColor, s.color, o.color];
    """
    sev_bg, state_bg, sev_fg, state_fg = await browser.script(
        colours, f"{critical} .sev", f"{critical} .state"
    )
    assert (sev_bg, sev_fg) != (state_bg, state_fg), "open must not look like critical"

    await browser.get("/alerts")
    assert (await browser.script(SEVERITIES, "#live li.alert"))[:4] == [
        "critical",
        "warning",
        "warning",
        "info",
    ]


@pytest.mark.parametrize("size", sorted(SIZES))
async def test_a_new_alert_arrives_without_a_reload(
    browser: Browser, dash: Harness, size: str
) -> None:
    await screen(browser, size)
    await browser.log_in(TOKEN)
    assert (await browser.text("#updated")).startswith("updated ")
    await poll_fast(browser)
    alert = await dash.router.raise_alert(severity="critical", title="Router unreachable")
    await browser.wait_for(f"#open-alerts #alert-{alert.code}", seconds=30)
    assert await same_page(browser), "the page was reloaded"
    assert (await browser.text("#status .headline")) == "1 critical alert not acknowledged"

    await browser.get("/alerts")
    await poll_fast(browser)
    later = await dash.router.raise_alert(severity="warning", title="Backups slow")
    await browser.wait_for(f"#live #alert-{later.code}", seconds=30)
    assert await same_page(browser), "the page was reloaded"
    assert "Backups slow" in await browser.text("#live")


async def fill_every_page(dash: Harness) -> None:
    """Something with a time on each page: jobs (one recurring, one once), a run, alerts
    of each severity, a monitor that is down."""
    jobs = parts_of(dash.app).jobs
    at = dash.clock.now + timedelta(minutes=30)
    await jobs.create(
        name="Morning news", instruction="News", cron_expression=f"{at.minute} {at.hour} * * *"
    )
    await jobs.create(name="Call the bank", instruction="Remind me", in_minutes=600)
    dash.clock.advance(minutes=30, seconds=1)
    await parts_of(dash.app).engine.run_due()
    await raise_in_order(dash)
    store = MonitorStore(MonitorRepo(dash.app.deps.db, dash.clock), MonitorLimits())
    nas = await store.create(
        "http", {"name": "NAS", "url": "http://nas.example.test/", "interval_seconds": 60}
    )
    failing = await store.repo.failed(nas, dash.clock.now, "connection refused")
    assert failing is not None
    now = dash.clock.now
    assert await store.repo.went_down(failing, now, "connection refused", [now])


async def visible_problems(browser: Browser) -> list[str]:
    text = await browser.text("body")
    return [m.group(0) for m in ISO.finditer(text)]


@pytest.mark.parametrize("size", sorted(SIZES))
async def test_every_page_in_words_and_no_sideways_scroll(
    browser: Browser, dash: Harness, size: str
) -> None:
    await fill_every_page(dash)
    await screen(browser, size)
    await browser.log_in(TOKEN)
    for path in PAGES:
        await browser.get(path)
        assert await visible_problems(browser) == [], path
        scroll, inner = await browser.script(WIDTH)
        assert scroll <= inner, (path, scroll, inner)
    await browser.get("/jobs")
    assert "you" in await browser.text("main")  # "Telegram, you" or "Terminal, you"
    # The spend tables keep every column: on a phone their rows stack, labelled.
    await browser.get("/spend")
    shown = await browser.script(
        "const r = document.querySelector('table.days tr[data-day]');"
        "return [getComputedStyle(r).display, r.querySelectorAll('td[data-label]').length]"
    )
    assert shown[1] >= 3 and shown[0] == ("block" if size == "phone" else "table-row"), shown
