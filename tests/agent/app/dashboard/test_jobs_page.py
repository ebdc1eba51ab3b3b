"""The Jobs page: every job with its next fires; pause, resume and delete by POST with CSRF,
through ``CronService`` like the ``manage_cronjob`` tool, recorded ``by: dashboard``."""

from __future__ import annotations

import html
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from agent.app.application import App
from scheduler.cron.job import CronJob
from tests.agent.app.dashboard.pages_kit import AUTH, NOW, client_of, csrf_of, dash_app, page
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.scheduling_kit import call_tool, parts_of

pytestmark = pytest.mark.clock(NOW)


async def _jobs(app: App) -> tuple[CronJob, CronJob]:
    jobs = parts_of(app).jobs
    daily = await jobs.create(
        name="Morning news", instruction="Summarise the news", cron_expression="0 8 * * *",
        timezone="Europe/Berlin",
    )  # fmt: skip
    once = await jobs.create(
        name="Call mum", instruction="Remind me to call mum", in_minutes=90,
        timezone="Europe/Berlin",
    )  # fmt: skip
    return daily, once


async def _post(client: TestClient[Any, Any], path: str, csrf: str | None, **more: str) -> Any:
    form = {"csrf": csrf, **more} if csrf is not None else {}
    return await client.post(path, data=form, headers=AUTH, allow_redirects=False)


async def test_lists_every_job_with_schedule_and_next_fires(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        daily, once = await _jobs(app)
        async with client_of(app) as client:
            text = html.unescape(await page(client, "/jobs"))
    assert "repeats: every day at 08:00 (Europe/Berlin)" in text
    assert "tomorrow 08:00, Sat 08:00, Sun 08:00" in text
    assert "once, 16:30, in 1 h 30 min, then kept as done" in text
    assert "Telegram, you" in text or "Terminal, you" in text
    assert f'action="/jobs/{daily.id}/pause"' in text and f'action="/jobs/{once.id}/pause"' in text
    assert f'action="/jobs/{daily.id}/delete"' in text


async def test_pause_resume_delete_with_csrf_through_the_service(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        daily, once = await _jobs(app)
        engine, jobs = parts_of(app).engine, parts_of(app).jobs
        assert f"cron:{daily.id}" in engine.armed
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/jobs"))
            paused = await _post(client, f"/jobs/{daily.id}/pause", csrf)
            flash_page = html.unescape(await page(client, "/jobs"))
            after_pause = await jobs.get(daily.id)
            armed_paused = f"cron:{daily.id}" in engine.armed
            clock.advance(days=2)  # fires missed while paused are not replayed
            resumed = await _post(client, f"/jobs/{daily.id}/resume", csrf)
            after_resume = await jobs.get(daily.id)
            deleted = await _post(client, f"/jobs/{once.id}/delete", csrf, confirm="yes")
            listed = await page(client, "/jobs")
        gone = await app.deps.db["cronjobs"].find_one({"_id": once.id})
    assert paused.status == 303 and paused.headers["Location"] == "/jobs"
    assert f"Paused “Morning news” ({daily.id})." in flash_page
    assert "<dt>Last changed by</dt><dd>dashboard</dd>" in flash_page
    assert f'action="/jobs/{daily.id}/resume"' in flash_page
    assert not after_pause.enabled and after_pause.updated_by == "dashboard"
    assert not armed_paused
    assert resumed.status == 303
    assert after_resume.enabled and after_resume.updated_by == "dashboard"
    assert after_resume.next_fire_at == (NOW + timedelta(days=2, hours=17))  # 29 Nov 08:00
    assert deleted.status == 303
    assert gone is None
    assert f'id="job-{once.id}"' not in listed and f'id="job-{daily.id}"' in listed
    assert f"Deleted “Call mum” ({once.id})." in html.unescape(listed)


async def test_changes_without_a_good_csrf_token_or_login_are_refused(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        daily, _ = await _jobs(app)
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/jobs"))
            missing = await _post(client, f"/jobs/{daily.id}/pause", None)
            wrong = await _post(client, f"/jobs/{daily.id}/delete", csrf[:-2] + "xx")
            anonymous = await client.post(
                f"/jobs/{daily.id}/delete", data={"csrf": csrf}, allow_redirects=False
            )
        job = await parts_of(app).jobs.get(daily.id)
    assert (missing.status, wrong.status, anonymous.status) == (403, 403, 401)
    assert job.enabled and job.updated_by is None


async def test_a_refused_change_says_why_and_changes_nothing(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        _, once = await _jobs(app)
        jobs = parts_of(app).jobs
        await jobs.toggle(once.id, False)
        clock.advance(hours=2)  # its time passes while it is paused
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/jobs"))
            resumed = await _post(client, f"/jobs/{once.id}/resume", csrf)
            late = html.unescape(await page(client, "/jobs"))
            unknown = await _post(client, "/jobs/nosuchjob/delete", csrf, confirm="yes")
            missing = html.unescape(await page(client, "/jobs"))
        job, count = await jobs.get(once.id), await jobs.count()
    assert resumed.status == unknown.status == 303
    assert f"Nothing changed: one-time job '{once.id}' was due at 2026-11-26T16:30" in late
    assert "Nothing changed: no cron job with id 'nosuchjob'" in missing
    assert not job.enabled and count == 2


async def test_a_later_change_by_the_model_clears_updated_by(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        daily, _ = await _jobs(app)
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/jobs"))
            await _post(client, f"/jobs/{daily.id}/pause", csrf)
        by_dashboard = await parts_of(app).jobs.get(daily.id)
        result = await call_tool(app, "manage_cronjob", None, action="toggle", job_id=daily.id)
        stored = await app.deps.db["cronjobs"].find_one({"_id": daily.id})
    assert by_dashboard.updated_by == "dashboard" and not by_dashboard.enabled
    assert result["updated"]["enabled"] is True
    assert stored is not None and "updated_by" not in stored and stored["enabled"]


async def test_delete_asks_first_and_an_unconfirmed_delete_changes_nothing(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        daily, _ = await _jobs(app)
        async with client_of(app) as client:
            text = await page(client, "/jobs")
            unconfirmed = await _post(client, f"/jobs/{daily.id}/delete", csrf_of(text))
            after = html.unescape(await page(client, "/jobs"))
        job = await parts_of(app).jobs.get(daily.id)
    card = html.unescape(text[text.index(f'id="job-{daily.id}"') :])
    start = card.index('<details class="confirm">')
    step = card[start : card.index("</details>", start)]
    assert "<summary" in step and "Delete…</summary>" in step  # the first click only opens
    assert f'action="/jobs/{daily.id}/delete"' in step
    assert '<input type="hidden" name="confirm" value="yes">' in step
    assert "Delete “Morning news”? It will not run again" in step and "Delete for good" in step
    assert unconfirmed.status == 303
    assert "Nothing deleted: confirm with “Delete for good”." in after
    assert job.enabled and job.updated_by is None and f'id="job-{daily.id}"' in after


async def test_a_job_says_whether_it_follows_the_owners_timezone(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    """Issue 40 item 1: a job on the owner's clock moves with the owner; one set on
    another zone keeps it; the page says which."""
    async with dash_app(app_db, tmp_path, clock) as app:
        await _jobs(app)
        await parts_of(app).jobs.create(
            name="Tokyo standup", instruction="x", cron_expression="0 9 * * *",
            timezone="Asia/Tokyo",
        )  # fmt: skip
        async with client_of(app) as client:
            text = html.unescape(await page(client, "/jobs"))
    assert "repeats: every day at 08:00 (Europe/Berlin), follows your timezone" in text
    assert "repeats: every day at 09:00 (Asia/Tokyo), keeps its own" in text
