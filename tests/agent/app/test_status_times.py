"""``/status`` says times as the owner reads them, in their zone: never ISO
(issue 39, item 9)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent.app.status import status_text

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 28, 9, 30, tzinfo=BERLIN)  # a Saturday morning
ISO = re.compile(r"\d{4}-\d\d-\d\d|T\d\d:\d\d|[+-]\d\d:\d\d")


@pytest.mark.parametrize(
    ("next_pulse_at", "said"),
    [
        ("2026-11-28T14:02+01:00", "next today 14:02"),
        ("2026-11-28T13:02+00:00", "next today 14:02"),  # UTC, shown in Berlin
        ("2026-11-29T07:00+01:00", "next tomorrow 07:00"),
        ("2026-11-30T07:00+01:00", "next Mon 30 Nov 07:00"),
    ],
)
def test_the_next_pulse_is_a_human_time_in_the_owner_zone(next_pulse_at: str, said: str) -> None:
    pulse: dict[str, Any] = {
        "enabled": True,
        "pulses_per_day": 4,
        "done_today": 1,
        "next_pulse_at": next_pulse_at,
    }
    data = {"pulse": pulse, "outbox": {"pending": 0, "failed": 0}}
    text = status_text(data, "m", tz=BERLIN, now=NOW)
    assert f"Pulse: 4/day, 1 done today, {said}" in text
    assert ISO.search(text) is None, text
