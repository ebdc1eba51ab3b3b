"""``scheduler.monitors.news``: when a monitor is flapping and what may be told when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.monitors.news import Damping, flap_text, news, noted, truth

T0 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
D = Damping()


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_more_than_four_changes_in_an_hour_is_flapping() -> None:
    four = [at(m) for m in (0, 10, 20, 30)]
    assert truth("up", "up", four, at(31), D) == "up"
    assert truth("down", "down", [*four, at(40)], at(41), D) == "flapping"
    spread = [at(m) for m in (0, 20, 40, 60, 80)]  # five changes, never five in an hour
    assert truth("down", "up", spread, at(81), D) == "down"


def test_flapping_lasts_until_fifteen_minutes_without_a_change() -> None:
    five = [at(m) for m in (0, 1, 2, 3, 4)]
    assert truth("up", "flapping", five, at(18.9), D) == "flapping"
    assert truth("up", "flapping", five, at(19), D) == "up"
    slow = [at(m) for m in (0, 14, 28, 42)]  # once told, fewer changes keep it flapping
    assert truth("down", "flapping", slow, at(55), D) == "flapping"
    assert truth("down", "flapping", slow, at(57), D) == "down"


def test_one_message_per_five_minutes_and_no_news_when_nothing_changed() -> None:
    changes = [at(0), at(1)]
    assert news("up", "down", at(0), changes, at(4.9), D) is None  # too soon
    assert news("up", "down", at(0), changes, at(5), D) == "up"
    assert news("down", "down", at(0), [*changes, at(2)], at(9), D) is None  # still down
    assert news("down", "up", None, [at(0)], at(0), D) == "down"  # never told: at once


def test_changes_kept_are_those_of_the_window_and_few() -> None:
    kept = noted([at(-61), at(-30)], at(0), D)
    assert kept == [at(-30), at(0)]
    many: list[datetime] = []
    for n in range(300):
        many = noted(many, at(n / 10), D)
    assert len(many) == D.kept and many[-1] == at(29.9)
    assert flap_text(many[-5:], at(30), D) == "changed state 5 times in 24 s"
