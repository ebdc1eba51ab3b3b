"""Runs, Jobs and Spend in a real browser: a failed run shows on the timeline in the
failed colour and opens its page; a job is paused from its card; a phone sees the
charts whole, with no sideways scrolling."""

from __future__ import annotations

from datetime import timedelta

from agent.app.dashboard.runs import STATUS_COLOURS
from scheduler.cron.job import CronJob
from tests.agent.app.dashboard.browser_kit import PHONE, Browser
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness
from tests.fakes.scripted import unavailable
from tests.scheduling_kit import parts_of

WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth]"
BOX = "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, r.width];"


async def _job(dash: Harness, name: str, minutes: int) -> CronJob:
    at = dash.clock.now + timedelta(minutes=minutes)
    return await parts_of(dash.app).jobs.create(
        name=name, instruction=f"Do {name}", cron_expression=f"{at.minute} {at.hour} * * *"
    )


async def _run(dash: Harness, minutes: int) -> None:
    dash.clock.advance(minutes=minutes, seconds=1)
    await parts_of(dash.app).engine.run_due()


async def test_a_failed_run_shows_on_the_timeline(browser: Browser, dash: Harness) -> None:
    await _job(dash, "Nightly backups", 30)
    await _job(dash, "Morning news", 60)
    dash.model.responder = lambda _req: unavailable()
    await _run(dash, 30)
    dash.model.responder = lambda _req: "Headlines read"
    await _run(dash, 30)
    runs = {r["name"]: r async for r in dash.app.deps.db["runs"].find({"kind": "cron"})}
    recorded = await dash.app.deps.db["runs"].count_documents({})  # the pulse's too
    failed, ok = runs["Nightly backups"], runs["Morning news"]
    assert (failed["status"], ok["status"]) == ("failed", "success")

    await browser.log_in(TOKEN)
    await browser.get("/runs")
    link = f'svg.timeline a[href="/runs/{failed["_id"]}"]'
    assert await browser.attr(f"{link} rect", "data-status") == "failed"
    assert await browser.attr(f"{link} rect", "fill") == STATUS_COLOURS["failed"]
    label = await browser.attr(link, "aria-label")
    assert label is not None
    assert label.startswith('cron "Nightly backups" failed, Thu 26 Nov 10:30')
    shown = await browser.script(
        "return getComputedStyle(document.querySelector(arguments[0])).fill", f"{link} rect"
    )
    assert shown == "rgb(198, 40, 40)"  # #c62828, as drawn
    ok_mark = f'svg.timeline a[href="/runs/{ok["_id"]}"] rect'
    assert await browser.attr(ok_mark, "data-status") == "success"
    assert len(await browser.find_all("svg.timeline rect.run")) == recorded
    assert "failed" in await browser.text(".legend")

    await browser.submit(f"{link} rect", "h1 .badge")
    assert (await browser.path()) == f"/runs/{failed['_id']}"
    page = await browser.text("main")
    assert "Nightly backups" in page and "failed" in page and "model unavailable" in page


async def test_pause_a_job_from_its_card(browser: Browser, dash: Harness) -> None:
    job = await _job(dash, "Water the plants", 90)
    await browser.log_in(TOKEN)
    await browser.get("/jobs")
    assert "Water the plants" in await browser.text(f"#job-{job.id}")
    await browser.submit(f"#job-{job.id} form[action$='/pause'] button", ".flash")
    assert (await browser.path()) == "/jobs"
    assert f"Paused “Water the plants” ({job.id})." in await browser.text(".flash")
    assert "paused" in await browser.text(f"#job-{job.id} .badge")
    stored = await parts_of(dash.app).jobs.get(job.id)
    assert not stored.enabled and stored.updated_by == "dashboard"


async def test_delete_a_job_takes_a_second_press(browser: Browser, dash: Harness) -> None:
    job = await _job(dash, "Old reminder", 90)
    await browser.log_in(TOKEN)
    await browser.get("/jobs")
    confirm = f"#job-{job.id} details.confirm button[type=submit]"
    assert not await browser.call((await browser.find(confirm)).is_displayed)
    await browser.click(f"#job-{job.id} details.confirm summary")
    assert await browser.call((await browser.find(confirm)).is_displayed)
    assert (await parts_of(dash.app).jobs.count()) == 1  # the first press deleted nothing
    await browser.submit(confirm, ".flash")
    assert f"Deleted “Old reminder” ({job.id})." in await browser.text(".flash")
    assert (await parts_of(dash.app).jobs.count()) == 0


async def test_a_phone_sees_runs_jobs_and_spend_whole(browser: Browser, dash: Harness) -> None:
    await _job(dash, "A job with a rather long name that could push a layout sideways", 30)
    await _run(dash, 30)
    await browser.phone()
    await browser.log_in(TOKEN)
    for path, chart in (("/runs", "svg.timeline"), ("/spend", "svg.spend-chart"), ("/jobs", "")):
        await browser.get(path)
        assert await browser.script(WIDTH) == [PHONE[0], PHONE[0]], path
        if chart:
            left, right, width = await browser.script(BOX, await browser.find(chart))
            assert left >= 0 and right <= PHONE[0] and width > PHONE[0] * 0.8, path
