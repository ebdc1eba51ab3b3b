""" "Don't bother me 22-7" and "twelve times a day but not at night", said to a scripted
model that uses the tools as offered, checked with ``watchkeeper schedule``."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

from agent.cli.upcoming import print_schedule
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel, sequence
from tests.scheduling_kit import scheduled_app, tool_call, tool_results

NOW = datetime(2026, 11, 26, 14, 5, tzinfo=BERLIN)  # Thursday


async def test_quiet_nights_and_twelve_pulses_a_day(app_db: AppDb, tmp_path: Path) -> None:
    clock = FakeClock(NOW.astimezone(UTC))
    model = ScriptedModel(lambda r: "")
    model.responder = sequence(
        tool_call(  # "don't bother me between 22:00 and 7:00"
            "manage_settings", action="update", quiet_hours=[{"start": "22:00", "end": "07:00"}]
        ),
        tool_call(  # "12 a day" (the kit starts with the pulse off)
            "manage_pulse", action="update_config", enabled=True, pulses_per_day=12
        ),
        "Done.",
    )
    async with scheduled_app(app_db, tmp_path, model, clock, timezone="Europe/Berlin") as app:
        await app.agent.respond("twelve checks a day, not at night", owner_ctx(app.deps))
        out = io.StringIO()
        assert await print_schedule(app.settings, 48, out=out, clock=clock) == 0
    results = tool_results(model)
    assert all("error" not in result for result in results), results
    friday = [line for line in out.getvalue().splitlines() if "2026-11-27" in line]
    pulses = [line.split()[2] for line in friday if "pulse" in line.lower()]
    assert len(pulses) == 12, out.getvalue()
    assert pulses[0] == "07:00" and pulses[-1] == "20:45"
    assert all("07:00" <= hhmm < "22:00" for hhmm in pulses)
