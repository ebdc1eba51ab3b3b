"""A test page running is not news for the pulse: no model call, no tokens (issue 39,
item 2); a real alert raised beside it still is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent.alerts.page_test import PageTestTimes
from agent.alerts.router import AlertRouter
from agent.app.features.alerts import AlertingOptions, alerting
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import parts_of, scheduled_app

OWNER_ID = 4242


async def test_a_running_test_page_leaves_the_pulse_idle(app_db: AppDb, tmp_path: Path) -> None:
    clock = FakeClock(datetime(2026, 3, 6, 12, 0, tzinfo=UTC))
    model = ScriptedModel(lambda r: "noted")
    telegram = RecordingChannel("telegram", clock=clock, sender=OWNER_ID)
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[telegram], pulse=True,
        owner_telegram_ids=[OWNER_ID], before=[alerting(AlertingOptions(background=False))],
    ) as app:  # fmt: skip
        parts = parts_of(app)
        await parts.pulse.owner.update(quiet_hours=[])
        await parts.pulse.update_config(pulses_per_day=24)
        router = app.deps.alerts
        assert isinstance(router, AlertRouter)
        long = timedelta(minutes=10)
        test = await router.page_tests.begin(PageTestTimes(step=long, wait=long))
        assert (await router.store.by_code(test.code)) is not None

        idle = await parts.engine.recorder.pulse(clock())
        assert idle.status == "skipped" and idle.reason == "idle"
        assert model.requests == []

        clock.advance(minutes=1)
        await router.raise_alert(severity="warning", title="Backup is late")
        clock.advance(hours=1)
        woke = await parts.engine.recorder.pulse(clock())
        assert woke.status != "skipped" and len(model.requests) == 1
