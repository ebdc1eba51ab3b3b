"""Durations and moments in replies, and the normalising in front of the grammar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.alerts.directives import Mute, ParsedReply, Snooze, parse_reply
from agent.alerts.reply_text import duration_minutes, normalise, until
from tests.fakes.clock import BERLIN

NOW = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)  # Thursday, 11:00 in Berlin
M = timedelta(minutes=1)
H = timedelta(hours=1)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("30", 30),
        ("90", 90),
        ("1 h 30", 90),
        ("1 h 30 m", 90),
        ("2 hours 15", 135),
        ("1.5 hours", 90),
        ("an hour", 60),
        ("a day", 1440),
        ("half an hour", 30),
        ("half hour", 30),
        ("a half hour", 30),
        ("a quarter of an hour", 15),
        ("two hours", 120),
        ("forty five minutes", 45),
        ("forty-five minutes", 45),
        ("twenty minutes", 20),
        ("an hour and a half", 90),
        ("two and a half hours", 150),
        ("a couple of hours", 120),
        ("1 hour and 15 minutes", 75),
        ("1 d 2 h", 1560),
    ],
)
def test_durations(text: str, minutes: float) -> None:
    assert duration_minutes(text, bare_minutes=True) == minutes


@pytest.mark.parametrize("text", ["", "soon", "2 months", "a bit", "1 h 30 x", "half", "and"])
def test_not_durations(text: str) -> None:
    assert duration_minutes(text, bare_minutes=True) is None


def test_a_bare_number_is_minutes_only_where_asked() -> None:
    assert duration_minutes("30") is None
    assert parse_reply("every 30").directive is None  # "every 30" of what? not guessed
    assert parse_reply("snooze 30").directive == Snooze(30 * M)
    assert parse_reply("mute 90").directive == Mute(90 * M)


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ("8 am", 21 * H),  # 08:00 in Berlin tomorrow is 07:00 UTC
        ("8:30 pm", 9 * H + 30 * M),
        ("20:30", 9 * H + 30 * M),
        ("at 7 pm", 8 * H),
        ("12 pm", H),
        ("noon", H),
        ("midnight", 13 * H),
        ("tomorrow", 22 * H),
        ("tomorrow morning", 22 * H),
        ("tomorrow 7 am", 20 * H),
        ("7 am tomorrow", 20 * H),
        ("monday", 3 * 24 * H + 22 * H),
        ("thursday", 7 * 24 * H - 2 * H),  # today is Thursday: next week's
    ],
)
def test_moments_are_the_next_one_in_the_owners_zone(text: str, held: timedelta) -> None:
    assert until(text, NOW, BERLIN) == held


def test_moments_honour_daylight_saving() -> None:
    before_change = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # Berlin 13:00 CET
    # 08:00 on Sunday 29 March is CEST (UTC+2): 06:00 UTC, 18 hours later
    assert until("8 am", before_change, BERLIN) == 18 * H


@pytest.mark.parametrize("text", ["8", "13 pm", "25:00", "later", "tomorrow 8", "0 am"])
def test_unclear_moments_are_not_guessed(text: str) -> None:
    assert until(text, NOW, BERLIN) is None


def test_until_needs_the_clock() -> None:
    assert parse_reply("snooze until 8am") == ParsedReply()
    reply = parse_reply("snooze until 8am", now=NOW, tz=BERLIN)
    assert reply.directive == Snooze(21 * H)
    assert parse_reply("mute until tomorrow", now=NOW, tz=UTC).directive == Mute(23 * H)


def test_a_moment_too_close_is_refused() -> None:
    almost = datetime(2026, 11, 26, 6, 59, 30, tzinfo=UTC)  # 07:59:30 in Berlin
    reply = parse_reply("snooze until 8am", now=almost, tz=BERLIN)
    assert reply.error == "Snooze needs a duration from 1m to 30d, not until 8am."


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("  ACK  ", "ack"),
        ("'1a'", "1a"),
        ("‘1c’", "1c"),
        ("“ack”", "ack"),
        ("«ok»", "ok"),
        ("Ack 👍", "ack"),
        ("resolved ✅", "resolved"),
        ("ack\u200b", "ack"),
        ("\ufeffack", "ack"),
        ("a\u200dck", "ack"),
        ("ack'd", "acked"),
        ("ack’d", "acked"),
        ("ackd", "acked"),
        ("*12a*", "12a"),
        ("_ok_", "ok"),
        ("(ack)", "ack"),
        ("ack...", "ack"),
        ("ack…", "ack"),
        ("done?", "done?"),
        ("１２ａ", "12a"),
        ("👍🏽", "👍"),
        ("👌", "👍"),
        ("🙂", ""),
        ("#12 👍", "#12 👍"),
        ("ok, thanks", "ok thanks"),
    ],
)
def test_normalise(text: str, normal: str) -> None:
    assert normalise(text) == normal


def test_long_text_is_only_lowered() -> None:
    text = "WHY " * 100
    assert normalise(text) == text.lower()
