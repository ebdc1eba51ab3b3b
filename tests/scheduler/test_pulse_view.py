"""What ``get_config`` and the status line say about the pulse: today's actual times."""

from __future__ import annotations

from datetime import UTC

from scheduler.pulse.grid import parse_quiet_hours
from scheduler.pulse.store import PulseState
from scheduler.views import pulse_status_text, pulse_view
from tests.scheduler.timing_kit import BERLIN, berlin

NIGHT = tuple(parse_quiet_hours([{"start": "22:00", "end": "07:00"}]))
FRIDAY_NOON = berlin(2026, 3, 6, 12, 30)


def _state(**kw: object) -> PulseState:
    fields: dict[str, object] = {"pulses_per_day": 12, "quiet_hours": NIGHT, "notes": ""}
    return PulseState(**(fields | kw))  # type: ignore[arg-type]


def test_today_lists_past_and_left_slots_with_offsets() -> None:
    view = pulse_view(_state(), BERLIN, FRIDAY_NOON.astimezone(UTC))
    assert view["today"] == {
        "slots_passed": [
            f"2026-03-06T{hm}+01:00" for hm in ("07:00", "08:15", "09:30", "10:45", "12:00")
        ],
        "slots_left": [
            f"2026-03-06T{hm}+01:00"
            for hm in ("13:15", "14:30", "15:45", "17:00", "18:15", "19:30", "20:45")
        ],
    }
    assert view["spacing"] == "between 07:00 and 22:00, every 1 h 15 min"
    assert view["remaining_today"] == 7
    assert view["next_pulse_at"] == "2026-03-06T13:15+01:00"
    assert "interval_minutes" not in view


def test_a_slot_at_now_is_past_and_the_cap_bounds_remaining() -> None:
    state = _state(done_today=10, done_day="2026-03-06")
    view = pulse_view(state, BERLIN, berlin(2026, 3, 6, 13, 15))
    assert view["today"]["slots_passed"][-1] == "2026-03-06T13:15+01:00"
    assert len(view["today"]["slots_left"]) == 6
    assert view["done_today"] == 10 and view["remaining_today"] == 2


def test_uneven_spacing_reads_about() -> None:
    view = pulse_view(_state(pulses_per_day=7, quiet_hours=()), BERLIN, FRIDAY_NOON)
    assert view["spacing"] == "round the clock from 00:00, about every 3 h 26 min"
    assert len(view["today"]["slots_passed"]) + len(view["today"]["slots_left"]) == 7


def test_an_inactive_day_and_a_disabled_pulse_have_no_times_today() -> None:
    saturday = berlin(2026, 3, 7, 9, 0)
    view = pulse_view(_state(active_days=(1, 2, 3, 4, 5)), BERLIN, saturday)
    assert view["today"] == {"slots_passed": [], "slots_left": []}
    assert view["next_pulse_at"] == "2026-03-09T07:00+01:00"
    off = pulse_view(_state(enabled=False), BERLIN, FRIDAY_NOON)
    assert off["today"] == {"slots_passed": [], "slots_left": []} and off["next_pulse_at"] is None


def test_a_stored_count_out_of_range_shows_no_times() -> None:
    view = pulse_view(_state(pulses_per_day=96), BERLIN, FRIDAY_NOON)
    assert view["spacing"] is None and view["today"] == {"slots_passed": [], "slots_left": []}
    assert view["remaining_today"] == 0 and view["next_pulse_at"] is None


def test_status_line_names_the_waking_window() -> None:
    text = pulse_status_text(_state(), BERLIN, FRIDAY_NOON, notes=False)
    assert text.startswith(
        "Pulse: on, 12/day between 07:00 and 22:00, every 1 h 15 min, every day.\n"
    )
    assert "next 13:15." in text
    lunch = parse_quiet_hours([{"start": "12:00", "end": "13:00"}])
    split = _state(pulses_per_day=8, quiet_hours=tuple(lunch))
    assert "8/day between 00:00 and 12:00 and between 13:00 and 24:00, about every 2 h 52 min" in (
        pulse_status_text(split, BERLIN, FRIDAY_NOON, notes=False)
    )
