"""The Monitors page: each monitor with its state, uptime over 24 hours and 30 days from
the counted checks, a response-time sparkline, the last and next check in the owner's
zone; create, edit, pause, resume and delete through the page's forms (CSRF, the
running service), bad input refused with its reason and nothing lost; a heartbeat's
ping URL shown once; flapping shown as such.

The whole app with the alert router and monitors, a local HTTP target, the fake clock
at Thursday 26 November 10:00 UTC, the owner in Berlin (11:00 there).
"""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

from aiohttp import ClientResponse

from agent.app.features.monitors import MonitoringOptions, monitoring
from scheduler.monitors.monitor import MonitorLimits
from scheduler.monitors.service import Monitors
from storage.repos.monitor_checks import CheckHistory
from tests.agent.app.dashboard.pages_kit import csrf_of
from tests.databases import AppDb
from tests.fakes.alert_app import ADMIN, PUBLIC_URL, START, Harness, alert_app
from tests.fakes.monitor_target import Target
from tests.fakes.page_site import page_site
from tests.waiting import until_async

AUTH = {"Authorization": f"Bearer {ADMIN}"}
QUICK = monitoring(MonitoringOptions(MonitorLimits(review_seconds=0.05)))
"""The real limits (a check at most every 30 s); news looked at often."""
BERLIN = {"timezone": "Europe/Berlin"}


async def page(h: Harness, path: str) -> str:
    resp = await h.client.get(path, headers=AUTH, allow_redirects=False)
    assert resp.status == 200, (path, resp.status, await resp.text())
    return html.unescape(await resp.text())


async def post(h: Harness, path: str, csrf: str | None, **form: str) -> ClientResponse:
    data = form | ({"csrf": csrf} if csrf is not None else {})
    return await h.client.post(path, data=data, headers=AUTH, allow_redirects=False)


def card(text: str, monitor_id: str) -> str:
    start = text.index(f'id="monitor-{monitor_id}"')
    return text[start : text.index("</section>", start)]


def running(h: Harness) -> tuple[Monitors, CheckHistory]:
    monitors = h.app.monitors
    assert monitors is not None and monitors.history is not None
    return monitors, monitors.history


def checked(h: Harness, monitor_id: str) -> Any:
    async def check() -> bool:
        doc = await h.app.deps.db["monitors"].find_one({"_id": monitor_id})
        return doc is not None and doc.get("last_check_at") is not None

    return check


async def stored(h: Harness) -> list[dict[str, Any]]:
    return await h.app.deps.db["monitors"].find({}).sort("created_at", 1).to_list(None)


async def test_each_monitor_with_state_uptime_sparkline_and_times_in_the_owners_zone(
    app_db: AppDb,
) -> None:
    target = await Target().start()
    async with alert_app(app_db, features=(QUICK,), **BERLIN) as h:
        monitors, history = running(h)
        web = await monitors.create(
            "http", {"name": "Web", "url": target.url, "interval_seconds": 3600}
        )
        await until_async(checked(h, web.id), "the first check, at 10:00 UTC")
        for hours in range(1, 24):  # one check an hour before it; the one 5 h ago failed
            await history.record(web.id, START - timedelta(hours=hours), hours != 5, 80 + hours)
        for _ in range(6):  # ten days ago: six failed checks
            await history.record(web.id, START - timedelta(days=10), False, None)
        beat = await monitors.create("heartbeat", {"name": "Backup", "period_seconds": 3600})
        flaky = await monitors.create(
            "http", {"name": "Flaky", "url": target.url, "interval_seconds": 3600}
        )
        await until_async(checked(h, flaky.id))
        changes = [START + timedelta(minutes=m) for m in range(6)]  # six changes in 5 min
        await h.app.deps.db["monitors"].update_one(
            {"_id": flaky.id}, {"$set": {"changes": changes}}
        )
        h.clock.advance(minutes=10)
        assert beat.token is not None
        assert (await h.client.get(f"/ping/{beat.token}")).status == 200
        text = await page(h, "/monitors")
    await target.stop()

    shown = card(text, web.id)
    assert '<span class="badge ok state-word">up</span>' in shown
    assert 'class="uptime-day">95.8% <span class="muted">of 24 checks' in shown
    assert 'class="uptime-month">76.7% <span class="muted">of 30 checks' in shown
    assert '<svg class="spark"' in shown
    assert "response times of the last 30 checks" in shown and "7 failed" in shown
    assert 'class="last-check">11:00, 10 min ago<' in shown  # Berlin, not UTC
    assert 'class="next-check">12:00, in 50 min<' in shown
    beat_card = card(text, beat.id)
    assert '<span class="badge ok state-word">up</span>' in beat_card
    assert 'class="last-ping">11:10, now<' in beat_card
    assert 'class="next-check">12:16, in 1 h 6 min<' in beat_card  # period + 6 min grace
    assert 'class="uptime-day">100% <span class="muted">of 1 check<' in beat_card
    assert "<svg" not in beat_card  # no response times for a heartbeat
    flaky_card = card(text, flaky.id)
    assert '<span class="badge warn state-word">flapping</span>' in flaky_card
    assert "changed state 6 times in 5 min" in flaky_card
    assert '<a href="/monitors" class="active" aria-current="page">Monitors</a>' in text


async def test_create_edit_pause_resume_delete_through_the_page(app_db: AppDb) -> None:
    target = await Target().start()
    async with alert_app(app_db, features=(QUICK,), **BERLIN) as h:
        csrf = csrf_of(await page(h, "/monitors"))
        made = await post(
            h, "/monitors", csrf, kind="http", name="Shop", url=target.url,
            interval_seconds="60", severity="critical", keyword="",
        )  # fmt: skip
        created = await page(h, "/monitors")
        [doc] = await stored(h)
        shop = doc["_id"]
        await until_async(checked(h, shop), "the new monitor is checked at once")

        edit_form = await page(h, f"/monitors/{shop}/edit")
        saved = await post(
            h, f"/monitors/{shop}/edit", csrf, name="Shop", url=target.url,
            interval_seconds="120", severity="critical", keyword="Sale",
        )  # fmt: skip
        [edited] = await stored(h)
        form = {"name": "Shop", "url": target.url, "interval_seconds": "120", "keyword": ""}
        cleared = await post(h, f"/monitors/{shop}/edit", csrf, **form, severity="critical")
        [after_clear] = await stored(h)

        paused = await post(h, f"/monitors/{shop}/pause", csrf)
        [after_pause] = await stored(h)
        paused_card = card(await page(h, "/monitors"), shop)
        resumed = await post(h, f"/monitors/{shop}/resume", csrf)
        [after_resume] = await stored(h)

        asked = await post(h, f"/monitors/{shop}/delete", csrf)
        question = html.unescape(await asked.text())
        kept = await stored(h)
        deleted = await post(h, f"/monitors/{shop}/delete", csrf, confirm="yes")
        gone = await page(h, "/monitors")
        left = await stored(h)
        history = await h.app.deps.db["monitor_checks"].count_documents({"monitor_id": shop})
    await target.stop()

    assert made.status == 303 and made.headers["Location"] == "/monitors"
    assert "Created “Shop”." in created and f'id="monitor-{shop}"' in created
    assert (doc["name"], doc["url"], doc["interval_seconds"]) == ("Shop", target.url, 60)
    assert doc["severity"] == "critical" and doc["keyword"] is None
    assert 'name="interval_seconds" value="60"' in edit_form
    assert 'name="period_seconds"' not in edit_form  # only what applies to an http check
    assert saved.status == 303
    assert (edited["interval_seconds"], edited["keyword"], edited["revision"]) == (120, "Sale", 2)
    assert cleared.status == 303 and after_clear["keyword"] is None  # emptied: no keyword
    assert after_clear["failures_before_alert"] == 2 and after_clear["interval_seconds"] == 120
    assert paused.status == 303 and after_pause["paused"] is True
    assert '<span class="badge muted state-word">paused</span>' in paused_card
    assert f'action="/monitors/{shop}/resume"' in paused_card
    assert 'class="next-check"><span class="muted">paused</span>' in paused_card
    assert resumed.status == 303 and after_resume["paused"] is False
    assert asked.status == 200 and "Delete “Shop”?" in question
    assert 'name="confirm" value="yes"' in question and len(kept) == 1  # asked, not done
    assert deleted.status == 303 and left == [] and history == 0
    assert "Deleted “Shop” and its history." in gone and f'id="monitor-{shop}"' not in gone


async def test_bad_input_is_refused_with_its_reason_and_loses_nothing(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(QUICK,), **BERLIN) as h:
        monitors, _ = running(h)
        kept = await monitors.create("heartbeat", {"name": "Backup", "period_seconds": 3600})
        csrf = csrf_of(await page(h, "/monitors"))
        base = {"kind": "http", "name": "Shop", "url": "https://shop.example/"}
        short = await post(h, "/monitors", csrf, **base, interval_seconds="10")
        short_text = html.unescape(await short.text())
        ftp = await post(h, "/monitors", csrf, **base | {"url": "ftp://shop.example/"})
        ftp_text = html.unescape(await ftp.text())
        words = await post(h, "/monitors", csrf, **base, interval_seconds="soon")
        words_text = html.unescape(await words.text())
        edit = await post(h, f"/monitors/{kept.id}/edit", csrf, name="Backup", period_seconds="5")
        edit_text = html.unescape(await edit.text())
        no_csrf = await post(h, f"/monitors/{kept.id}/delete", None, confirm="yes")
        unknown = await post(h, "/monitors/nosuch/pause", csrf)
        after_unknown = await page(h, "/monitors")
        left = await stored(h)

    assert short.status == 400
    assert (
        "Not saved: interval_seconds must be between 30 and 86400 (a check at most every 30 s);"
        " got 10" in short_text
    )
    assert 'name="name" value="Shop"' in short_text  # what was typed is still there
    assert 'name="interval_seconds" value="10"' in short_text
    assert ftp.status == 400
    assert "url must start with http:// or https://" in ftp_text
    assert words.status == 400
    assert "interval_seconds must be a whole number; got 'soon'" in words_text
    assert edit.status == 400 and "Not saved: period_seconds must be between 30" in edit_text
    assert 'name="period_seconds" value="5"' in edit_text
    assert no_csrf.status == 403
    assert unknown.status == 303 and "Nothing changed: no monitor with id 'nosuch'" in after_unknown
    assert [(m["name"], m["period_seconds"], m["paused"]) for m in left] == [
        ("Backup", 3600, False)
    ]


async def test_a_heartbeats_ping_url_is_shown_once_then_masked(app_db: AppDb) -> None:
    async with alert_app(app_db, features=(QUICK,), **BERLIN) as h:
        csrf = csrf_of(await page(h, "/monitors"))
        made = await post(
            h, "/monitors", csrf, kind="heartbeat", name="Backup", period_seconds="3600"
        )
        first = html.unescape(await made.text())
        found = re.search(r'<code class="ping-url">([^<]+)</code>', first)
        assert made.status == 200 and found is not None
        url = found.group(1)
        token = url.rsplit("/", 1)[1]
        later = await page(h, "/monitors")
        pinged = await h.client.get(url.removeprefix(PUBLIC_URL))
        after_ping = await page(h, "/monitors")
        [doc] = await stored(h)

    assert url.startswith(f"{PUBLIC_URL}/ping/") and len(token) >= 30
    assert "shown only this once" in first
    assert token not in later and token not in after_ping
    assert f"{PUBLIC_URL}/ping/••••••••" in card(later, doc["_id"])
    assert pinged.status == 200
    assert 'class="last-ping">11:00, now<' in card(after_ping, doc["_id"])


async def test_the_list_is_live(app_db: AppDb) -> None:
    """``static/live.js`` swaps in ``/live/monitors``: a heartbeat that fails shows
    down without a reload."""
    async with alert_app(app_db, features=(QUICK,), **BERLIN) as h:
        monitors, _ = running(h)
        beat = await monitors.create("heartbeat", {"name": "Backup", "period_seconds": 3600})
        assert beat.token is not None
        shown = await page(h, "/monitors")
        before = await (await h.client.get("/live/monitors", headers=AUTH)).json()
        assert (await h.client.post(f"/ping/{beat.token}/fail")).status == 200
        after = await (await h.client.get("/live/monitors", headers=AUTH)).json()
        anonymous = await h.client.get("/live/monitors", allow_redirects=False)

    assert 'data-live="/live/monitors"' in shown and "/static/live.js" in shown
    assert before["updated"] == "11:00"
    assert '<span class="badge muted state-word">no ping yet</span>' in before["html"]
    down = card(html.unescape(after["html"]), beat.id)
    assert '<span class="badge bad state-word">down</span>' in down
    assert "down for 0 s: reported a failure (/fail)" in down
    assert 'action="/monitors' in down  # its buttons come along, with their CSRF field
    assert 'name="csrf"' in down
    assert anonymous.status == 303  # to the login, with no data


CHANGING = monitoring(
    MonitoringOptions(
        MonitorLimits(
            min_interval_seconds=1,
            min_change_interval_seconds=1,
            timeout_seconds=5,
            review_seconds=0.05,
        )
    )
)
"""Change monitors checked every second: the five-minute floor lowered, as only a test may."""


def shop(price: str, css: str = "price") -> str:
    return f"<html><body><h1>Shop</h1><p class='{css}'>{price} EUR</p></body></html>"


def stored_as(h: Harness, monitor_id: str, name: str, wanted: Any = ...) -> Any:
    """Waits for the monitor's ``name`` to be set (or to be ``wanted``)."""

    async def check() -> bool:
        doc = await h.app.deps.db["monitors"].find_one({"_id": monitor_id}) or {}
        return doc.get(name) is not None if wanted is ... else doc.get(name) == wanted

    return check


async def test_a_change_monitor_shows_its_last_change_and_a_lost_selector_in_words(
    app_db: AppDb,
) -> None:
    async with (
        page_site(shop("249")) as site,
        alert_app(app_db, features=(CHANGING,), **BERLIN) as h,
    ):
        monitors, _history = running(h)
        price = await monitors.create(
            "change",
            {"name": "Price", "url": site.url, "interval_seconds": 1, "selector": ".price"},
        )
        await until_async(stored_as(h, price.id, "page_hash"), "the first check, the baseline")
        shown = card(await page(h, "/monitors"), price.id)
        assert f"compares the selector '.price' of {site.url} every 1 s" in shown
        assert 'class="last-change"><span class="muted">none since the first check<' in shown

        site.html = shop("199")
        await until_async(stored_as(h, price.id, "changed_at"), "the change seen")
        shown = card(await page(h, "/monitors"), price.id)
        assert 'class="last-change">11:00, now<' in shown  # Berlin, not UTC
        assert '<span class="badge ok state-word">up</span>' in shown

        site.html = shop("199", css="cost")
        await until_async(stored_as(h, price.id, "page_found", False), "the selector lost")
        shown = card(await page(h, "/monitors"), price.id)
    assert '<span class="badge warn state-word">selector no longer matches</span>' in shown
    assert "the selector '.price' no longer matches on the page (its layout may" in shown
