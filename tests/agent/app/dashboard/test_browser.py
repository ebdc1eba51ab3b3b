"""The dashboard in a real browser: log in, see an alert, press Ack, see it acknowledged;
a wrong token stays out; a phone-sized screen needs no sideways scrolling."""

from __future__ import annotations

from tests.agent.app.dashboard.browser_kit import PHONE, Browser
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness

WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth]"
"""On a phone an overflowing page widens the layout viewport (``innerWidth``) too."""
OUTSIDE = """
const width = arguments[1];
return [...document.querySelectorAll(arguments[0])]
  .map(e => e.getBoundingClientRect())
  .filter(r => r.width === 0 || r.left < 0 || r.right > width).length;
"""


async def test_log_in_see_an_alert_and_ack_it(browser: Browser, dash: Harness) -> None:
    alert = await dash.router.raise_alert(severity="warning", title="Backup failed on nas")
    code = alert.code
    await browser.log_in(TOKEN)
    assert (await browser.path()) == "/"
    card = f"#open-alerts #alert-{code}"
    assert "Backup failed on nas" in await browser.text(card)
    assert await browser.attr(card, "data-status") == "open"
    session = [c for c in await browser.cookies() if c["name"] == "wk_session"]
    assert session and session[0]["httpOnly"] and session[0]["sameSite"] == "Strict"

    await browser.submit(f"{card} button[value=ack]", ".flash")

    assert (await browser.path()) == "/"
    assert f"#{code} acknowledged" in await browser.text(".flash")
    assert await browser.attr(card, "data-status") == "acknowledged"
    stored = await dash.router.store.by_code(code)
    assert stored is not None and stored.acknowledged_by == "dashboard"
    assert stored.history[-1].by == "dashboard"
    await browser.get("/alerts")
    assert "acknowledged" in await browser.text(f"#alert-{code} .history")
    assert "via dashboard" in await browser.text(f"#alert-{code}")


async def test_a_wrong_token_stays_logged_out(browser: Browser, dash: Harness) -> None:
    await dash.router.raise_alert(severity="critical", title="Server on fire")
    await browser.log_in("wrong-token-0123456789")
    assert (await browser.path()).startswith("/login")
    assert "That token is not right." in await browser.text()
    assert not [c for c in await browser.cookies() if c["name"] == "wk_session"]
    await browser.get("/")
    assert (await browser.path()).startswith("/login")
    assert "Server on fire" not in await browser.text()


async def test_a_phone_sees_the_nav_and_the_buttons(browser: Browser, dash: Harness) -> None:
    await dash.router.raise_alert(
        severity="warning",
        title="A rather long alert title that would push a careless layout sideways " * 2,
        body="https://example.test/a/very/long/url/without/any/spaces/" + "x" * 120,
    )
    await browser.phone()
    await browser.log_in(TOKEN)
    links = await browser.find_all("nav.nav a")
    assert [await browser.call(lambda e=e: e.text) for e in links] == [
        "Overview",
        "Runs",
        "Alerts",
        "Jobs",
        "Monitors",
        "Spend",
        "Memory",
    ]
    assert await browser.script(WIDTH) == [PHONE[0], PHONE[0]]
    assert await browser.script(OUTSIDE, "nav.nav a, #open-alerts button", PHONE[0]) == 0
    assert len(await browser.find_all("#open-alerts button")) == 3  # Ack, Snooze 1h, Resolve
    await browser.get("/alerts")
    assert await browser.script(WIDTH) == [PHONE[0], PHONE[0]]
