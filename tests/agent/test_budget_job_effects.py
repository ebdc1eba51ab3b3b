"""When the daily budget stops a task right after it set a reminder, the owner hears
that the reminder was created and that it is skipped if it falls due before the
budget resets (issue 40, item 6: say what happened, including what will not)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.agent.test_budget import NOW, api, rig, tool_round
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.fakes.openai_api import FakeOpenAI
from tests.scheduling_kit import parts_of

__all__ = ["api"]  # a fixture, imported for pytest
pytestmark = pytest.mark.clock(NOW)


async def test_a_reminder_set_as_the_cap_stops_says_it_is_skipped_before_the_reset(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock, budget=50) as r:
        remind = {"action": "create", "name": "Call Bob", "instruction": "remind me to call Bob",
                  "in_minutes": 60}  # fmt: skip
        tool_round(api, "manage_cronjob", remind, usage=(50, 5))  # 55: over the cap
        sent = await r.ask("remind me in an hour to call Bob")
        [answer] = [t for t in sent if "stopped before finishing" in t]
        clock.advance(timedelta(minutes=61))  # due, and the budget is still spent
        await parts_of(r.app).engine.run_due()
        [run] = await r.app.deps.db["runs"].find({"name": "Call Bob"}).to_list()
    assert 'What took effect before it stopped: manage_cronjob created "Call Bob" (' in answer
    assert answer.endswith("A job due before the reset is skipped unless the budget is raised."), (
        answer
    )
    assert run["status"] == "skipped"  # as the answer said
