"""Attention in the browser (issue 39, item 8): the tab title counts the critical alerts
nobody acknowledged, a notification for each new one once the owner allowed them (never
asked on load), a sound only when the owner turned it on."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.alerts.directives import Ack
from tests.agent.app.dashboard.browser_kit import Browser
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness

BEARER = {"Authorization": f"Bearer {TOKEN}"}
SCRIPT = Path(__file__).parents[4] / "agent" / "app" / "dashboard" / "static" / "attention.js"


async def seed(dash: Harness) -> tuple[str, str]:
    """Two critical alerts (the first acknowledged) and a warning: (acked, open) codes."""
    acked = await dash.router.raise_alert(severity="critical", title="Site down")
    dash.clock.advance(minutes=1)
    waiting = await dash.router.raise_alert(severity="critical", title="Disk full")
    await dash.router.raise_alert(severity="warning", title="Backups slow")
    await dash.router.apply(str(acked.code), Ack(), "dashboard")
    return str(acked.code), str(waiting.code)


async def test_attention_counts_only_unacknowledged_critical_alerts(dash: Harness) -> None:
    _acked, waiting = await seed(dash)
    out = await dash.client.get("/live/attention", allow_redirects=False)
    assert out.status == 303 and out.headers["Location"].startswith("/login")
    resp = await dash.client.get("/live/attention", headers=BEARER)
    assert resp.status == 200 and resp.content_type == "application/json"
    body = await resp.json()
    assert body["critical"] == 1
    assert body["alerts"] == [{"code": waiting, "title": "Disk full"}]
    assert re.fullmatch(r"\d\d:\d\d", body["updated"])


async def test_every_page_carries_the_script_and_the_allow_control(dash: Harness) -> None:
    for path in ("/", "/alerts", "/runs", "/jobs", "/spend", "/memory"):
        page = await (await dash.client.get(path, headers=BEARER)).text()
        assert '<script src="/static/attention.js" defer></script>' in page, path
        assert 'id="allow-notifications"' in page and ">Allow notifications</button>" in page
        assert 'id="alert-sound"' in page, path
        assert re.search(r"<script(?![^>]*\bsrc=)", page) is None, "no inline script"
    login = await (await dash.client.get("/login")).text()
    assert "attention.js" not in login, "nothing to watch before the login"
    script = await (await dash.client.get("/static/attention.js")).text()
    asked = script.index("requestPermission(")
    assert script.rindex('addEventListener("click"', 0, asked) > 0, "asked only on a click"
    assert script.count("requestPermission(") == 1
    assert "localStorage.getItem(key)" in script and "createOscillator" in script


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_title_and_news_logic_in_node() -> None:
    program = f"""
    const a = require({json.dumps(str(SCRIPT))});
    const first = a.fresh({{}}, [{{code: "3", title: "Site down"}}], true);
    const later = a.fresh(first.seen, [{{code: "4"}}, {{code: "3"}}], false);
    const again = a.fresh(later.seen, [{{code: "4"}}, {{code: "3"}}], false);
    console.log(JSON.stringify({{
      titled: [a.titled("Overview · Watchkeeper", 2), a.titled("(2) Overview · Watchkeeper", 1),
               a.titled("(1) Alerts · Watchkeeper", 0)],
      first: first.news.length, later: later.news.map(x => x.code), again: again.news.length
    }}));
    """
    done = subprocess.run(["node", "-e", program], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {
        "titled": ["(2) Overview · Watchkeeper", "(1) Overview · Watchkeeper",
                   "Alerts · Watchkeeper"],
        "first": 0,
        "later": ["4"],
        "again": 0,
    }  # fmt: skip


TITLE = "return document.title"
NOTIFIED = "return document.getElementById('attention').getAttribute('data-notified')"
PERMISSION = "return Notification.permission"


async def wait_js(browser: Browser, js: str, want: object, seconds: float = 30) -> None:
    from selenium.webdriver.support.wait import WebDriverWait

    def there(driver: object) -> bool:
        return bool(browser.driver.execute_script(js) == want)

    await browser.call(WebDriverWait(browser.driver, seconds).until, there)


async def test_the_tab_title_counts_and_only_new_alerts_notify(
    browser: Browser, dash: Harness
) -> None:
    await seed(dash)
    grant = {"origin": browser.base_url, "permissions": ["notifications"]}
    await browser.call(browser.driver.execute_cdp_cmd, "Browser.grantPermissions", grant)
    try:
        await browser.log_in(TOKEN)
        await wait_js(browser, TITLE, "(1) Overview · Watchkeeper")
        assert await browser.script(PERMISSION) == "granted"
        assert await browser.script("return document.getElementById('allow-notifications').hidden")
        await browser.script("document.getElementById('attention').dataset.every = '1'")
        new = await dash.router.raise_alert(severity="critical", title="Router unreachable")
        await dash.router.raise_alert(severity="warning", title="Not critical")
        await wait_js(browser, TITLE, "(2) Overview · Watchkeeper")
        await wait_js(browser, NOTIFIED, str(new.code))  # the one open at load: no news

        await browser.get("/alerts")  # a new page: all three open ones are old news
        await wait_js(browser, TITLE, "(2) Alerts · Watchkeeper")
        await dash.router.apply(str(new.code), Ack(), "dashboard")
        await browser.script("document.getElementById('attention').dataset.every = '1'")
        await wait_js(browser, TITLE, "(1) Alerts · Watchkeeper")
        assert await browser.script(NOTIFIED) is None
    finally:
        await browser.call(browser.driver.execute_cdp_cmd, "Browser.resetPermissions", {})


async def test_permission_is_asked_only_by_the_button_and_sound_is_off(
    browser: Browser, dash: Harness
) -> None:
    await browser.log_in(TOKEN)
    await wait_js(browser, "return document.getElementById('attention').dataset.polled", "1")
    assert await browser.script(PERMISSION) == "default", "asked on load"
    assert not await browser.script("return document.getElementById('allow-notifications').hidden")
    assert await browser.script("return document.getElementById('alert-sound').checked") is False
    await browser.click("label.sound")
    await browser.get("/alerts")
    await wait_js(browser, "return document.getElementById('alert-sound').checked", True)
    assert await browser.script("return localStorage.getItem('watchkeeper.sound')") == "on"
