"""The reply-directive parser: exact grammar only, carrier keywords untouched."""

from datetime import time, timedelta

import pytest

from agent.alerts.directives import (
    Ack,
    Directive,
    Mute,
    ParsedReply,
    PauseJob,
    PausePulse,
    Resolve,
    ResumeJob,
    ResumePulse,
    SetCadence,
    SetInterval,
    SetPulseRate,
    SetTime,
    Snooze,
    Unmute,
    format_duration,
    help_text,
    parse_reply,
)

H = timedelta(hours=1)
M = timedelta(minutes=1)
D = timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ack
        ("ack", Ack()),
        ("ok", Ack()),
        ("okay", Ack()),
        ("acknowledge", Ack()),
        ("acknowledged", Ack()),
        ("acked", Ack()),
        # resolve
        ("resolve", Resolve()),
        ("resolved", Resolve()),
        ("done", Resolve()),
        ("close", Resolve()),
        ("closed", Resolve()),
        ("fixed", Resolve()),
        # snooze
        ("snooze", Snooze(H)),
        ("snooze 1h", Snooze(H)),
        ("snooze 30m", Snooze(30 * M)),
        ("snooze 2 hours", Snooze(2 * H)),
        ("snooze 1d", Snooze(D)),
        ("snooze 90 min", Snooze(90 * M)),
        ("snooze 1 minute", Snooze(M)),
        ("snooze 45 mins", Snooze(45 * M)),
        ("snooze 3 hrs", Snooze(3 * H)),
        ("snooze 1 hr", Snooze(H)),
        ("snooze 2 days", Snooze(2 * D)),
        ("snooze 1w", Snooze(7 * D)),
        ("snooze 2 weeks", Snooze(14 * D)),
        ("snooze 30d", Snooze(30 * D)),
        ("snooze 1h 30m", Snooze(90 * M)),
        ("snooze 1h30m", Snooze(90 * M)),
        ("snooze 1 hour and 15 minutes", Snooze(75 * M)),
        ("snooze 1.5h", Snooze(90 * M)),
        ("snooze for 2h", Snooze(2 * H)),
        # mute / unmute
        ("mute", Mute(D)),
        ("mute 1d", Mute(D)),
        ("mute 2h", Mute(2 * H)),
        ("mute for 3 days", Mute(3 * D)),
        ("unmute", Unmute()),
        # cron schedule
        ("daily", SetCadence("daily")),
        ("weekly", SetCadence("weekly")),
        ("hourly", SetCadence("hourly")),
        ("weekdays", SetCadence("weekdays")),
        ("every day", SetCadence("daily")),
        ("every hour", SetCadence("hourly")),
        ("every week", SetCadence("weekly")),
        ("every weekday", SetCadence("weekdays")),
        ("make it weekly", SetCadence("weekly")),
        ("make this daily", SetCadence("daily")),
        ("make this every 2 hours", SetInterval(2, "hours")),
        ("every 2 hours", SetInterval(2, "hours")),
        ("every 15 minutes", SetInterval(15, "minutes")),
        ("every 3 days", SetInterval(3, "days")),
        ("every 30m", SetInterval(30, "minutes")),
        ("every 2h", SetInterval(2, "hours")),
        ("every 1 min", SetInterval(1, "minutes")),
        ("every 120 min", SetInterval(2, "hours")),
        ("every 24 hours", SetInterval(1, "days")),
        ("at 07:30", SetTime(time(7, 30))),
        ("at 7:30", SetTime(time(7, 30))),
        ("at 23:59", SetTime(time(23, 59))),
        ("at 0:00", SetTime(time(0, 0))),
        ("at 18.45", SetTime(time(18, 45))),
        ("pause", PauseJob()),
        ("resume", ResumeJob()),
        # pulse
        ("pause pulse", PausePulse()),
        ("pause the pulse", PausePulse()),
        ("resume pulse", ResumePulse()),
        ("resume the pulse", ResumePulse()),
        ("pulse 12 per day", SetPulseRate(12)),
        ("pulse 48 per day", SetPulseRate(48)),
        ("pulse 2 per day", SetPulseRate(2)),
        ("pulse 1 per day", SetPulseRate(1)),
        ("pulse 7 per day", SetPulseRate(7)),
        ("pulse 5/day", SetPulseRate(5)),
        ("pulse 6/day", SetPulseRate(6)),
        ("pulse 24 times a day", SetPulseRate(24)),
        ("pulse 12x per day", SetPulseRate(12)),
    ],
)
def test_directive_forms(text: str, expected: Directive) -> None:
    everyday = expected.scope in ("cron", "pulse") or text in ("ok", "okay", "done", "fixed")
    assert parse_reply(text) == ParsedReply(directive=expected, everyday=everyday)


@pytest.mark.parametrize(
    ("text", "everyday"),
    [
        ("weekly", True),
        ("resume", True),
        ("pause", True),
        ("make it weekly", True),
        ("every 2h", True),
        ("at 07:30", True),
        ("every 7h", True),  # an error about a job word is conversation too
        ("ok", True),
        ("done", True),
        ("#2 weekly", False),  # a code names the alert
        ("2 ack", False),
        ("ack", False),
        ("snooze 1h", False),
        ("pause pulse", True),  # issue 32: changes the pulse only as a clear answer
        ("pulse 6 per day", True),
        ("#2 pause pulse", False),
    ],
)
def test_everyday_words_are_marked(text: str, everyday: bool) -> None:
    """Words that are also conversation apply only to an alert they plainly answer."""
    assert parse_reply(text).everyday is everyday


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ACK", Ack()),
        ("Ok", Ack()),
        ("ack!", Ack()),
        ("ok.", Ack()),
        ("Done!!", Resolve()),
        ("  ack  ", Ack()),
        ("\tok\n", Ack()),
        ("SNOOZE 2H", Snooze(2 * H)),
        ("snooze   2   hours", Snooze(2 * H)),
        ("Pause Pulse.", PausePulse()),
        ("Every 15 Minutes", SetInterval(15, "minutes")),
    ],
)
def test_case_whitespace_and_punctuation_are_tolerated(text: str, expected: Directive) -> None:
    assert parse_reply(text).directive == expected


@pytest.mark.parametrize(
    ("text", "code", "expected"),
    [
        ("#12 ack", "12", Ack()),
        ("ack #12", "12", Ack()),
        ("#12 snooze 2h", "12", Snooze(2 * H)),
        ("snooze 2h #12", "12", Snooze(2 * H)),
        ("#7 resolve", "7", Resolve()),
        ("#12: ack", "12", Ack()),
        ("ack, #12", "12", Ack()),
        ("ack #12!", "12", Ack()),
        ("#12 ack #12", "12", Ack()),
        ("#3 every 2 hours", "3", SetInterval(2, "hours")),
        ("#12 pulse 12 per day", "12", SetPulseRate(12)),
        # GoAlert shorthand
        ("12a", "12", Ack()),
        ("12c", "12", Resolve()),
        ("12A", "12", Ack()),
        ("7a", "7", Ack()),
        # issue #13: the forms are GoAlert's and PagerDuty's; codes are digits only
        ("#12a", "12", Ack()),
        ("ack#12", "12", Ack()),
        ("#012 ack", "12", Ack()),
        ("3c.", "3", Resolve()),
    ],
)
def test_codes_before_after_and_shorthand(text: str, code: str, expected: Directive) -> None:
    assert parse_reply(text) == ParsedReply(code=code, directive=expected)


@pytest.mark.parametrize(
    "text",
    [
        "STOP",
        "stop",
        "Stop.",
        "Help",
        "HELP!",
        "START",
        "unsubscribe",
        "STOPALL",
        "cancel",
        "end",
        "quit",
        "revoke",
        "optout",
        "yes",
        "UNSTOP",
        "info",
    ],
)
def test_carrier_keywords_are_reserved(text: str) -> None:
    assert parse_reply(text) == ParsedReply(reserved=True)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("ok but why did the backup fail?", None),
        ("why did the backup fail?", None),
        ("done?", None),
        ("ack?", None),
        ("snooze until whenever", None),
        ("snooze until tomorrow", None),  # without a clock; see test_durations
        ("snooze 2h please", None),
        ("snooze for", None),
        ("snooze 2 months", None),
        ("mute everything", None),
        ("every now and then", None),
        ("at noon", None),
        ("at 7", None),
        ("pulse faster", None),
        ("make it better", None),
        ("make it pause", None),
        ("pizza", None),
        ("ca", None),
        ("", None),
        ("   ", None),
        ("#12", "12"),
        ("#12 what happened here?", "12"),
        ("what happened with #7 yesterday", "7"),
        ("stop #12", "12"),
        ("#toolonghashtag ack", None),
        ("#a7 resolve", None),
        ("a7a", None),
        ("#123456789 ack", None),
    ],
)
def test_free_text_goes_to_the_agent(text: str, code: str | None) -> None:
    assert parse_reply(text) == ParsedReply(code=code)


def test_a_hashtag_is_not_a_code() -> None:
    """Codes are digits only (issue #13): a hashtag names no alert."""
    assert parse_reply("#urgent call me") == ParsedReply()


def test_thumbs_up_is_a_short_acknowledgement() -> None:
    """👍 acks only as a reply to an alert (issue #13), unlike ``ack`` and ``ok``."""
    for text in ("👍", "👍🏽", "👍\ufe0f"):
        assert parse_reply(text) == ParsedReply(directive=Ack(), short=True)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("snooze 0m", "1m to 30d"),
        ("snooze 400d", "not 400d"),
        ("snooze 31 days", "1m to 30d"),
        ("snooze 0.2m", "1m to 30d"),
        ("snooze 99999999999999999999999999999999999d", "1m to 30d"),
        ("mute 0h", "Mute needs"),
        ("mute 5w", "1m to 30d"),
        ("at 25:00", "24-hour HH:MM"),
        ("at 12:60", "24-hour HH:MM"),
        ("at 24:00", "24-hour HH:MM"),
        ("every 0 min", "the least is 1 minute"),
        ("every 90 min", "divide an hour"),
        ("every 7 minutes", "divide an hour"),
        ("every 5 hours", "divide a day"),
        ("every 36h", "divide a day"),
        ("every 40 days", "31 days"),
        ("make it every 0 min", "the least is 1 minute"),
        ("pulse 49 per day", "1 to 48 times per day (a whole number), not 49"),
        ("pulse 0 per day", "1 to 48 times per day (a whole number), not 0"),
        ("pulse 100000 per day", "not 100000"),
    ],
)
def test_invalid_parameters_give_an_error(text: str, fragment: str) -> None:
    reply = parse_reply(text)
    assert reply.directive is None
    assert not reply.reserved
    assert reply.error is not None
    assert fragment in reply.error


def test_error_keeps_the_code() -> None:
    reply = parse_reply("#12 snooze 0m")
    assert reply.code == "12"
    assert reply.error is not None


def test_two_codes_with_a_directive_is_an_error() -> None:
    reply = parse_reply("#12 ack #13")
    assert reply.directive is None
    assert reply.error == "Found #12 and #13: reply about one alert at a time."
    assert parse_reply("12a #13").error == "Found #13 and #12: reply about one alert at a time."


@pytest.mark.parametrize(
    ("directive", "scope"),
    [
        (Ack(), "alert"),
        (Resolve(), "alert"),
        (Snooze(H), "alert"),
        (Mute(D), "alert"),
        (Unmute(), "alert"),
        (SetCadence("daily"), "cron"),
        (SetInterval(2, "hours"), "cron"),
        (SetTime(time(7, 30)), "cron"),
        (PauseJob(), "cron"),
        (ResumeJob(), "cron"),
        (PausePulse(), "pulse"),
        (ResumePulse(), "pulse"),
        (SetPulseRate(12), "pulse"),
    ],
)
def test_each_directive_has_a_scope(directive: Directive, scope: str) -> None:
    assert directive.scope == scope


def test_kinds_are_distinct() -> None:
    kinds = {
        d.kind
        for d in (
            Ack(),
            Resolve(),
            Snooze(H),
            Mute(D),
            Unmute(),
            SetCadence("daily"),
            SetInterval(1, "days"),
            SetTime(time(1, 0)),
            PauseJob(),
            ResumeJob(),
            PausePulse(),
            ResumePulse(),
            SetPulseRate(2),
        )
    }
    assert len(kinds) == 13


def test_interval_property() -> None:
    assert SetInterval(15, "minutes").interval == 15 * M
    assert SetInterval(3, "days").interval == 3 * D


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (2 * H, "2h"),
        (D, "1d"),
        (30 * M, "30m"),
        (90 * M, "1h 30m"),
        (D + 2 * H + 5 * M, "1d 2h 5m"),
        (30 * D, "30d"),
        (timedelta(0), "0m"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=1, seconds=59), "1m"),
        (-2 * H, "-2h"),
    ],
)
def test_format_duration(td: timedelta, text: str) -> None:
    assert format_duration(td) == text


@pytest.mark.parametrize("text", ["snooze 1h 30m", "snooze 2d", "snooze 45m", "mute 1d 1m"])
def test_format_duration_round_trips(text: str) -> None:
    directive = parse_reply(text).directive
    assert isinstance(directive, Snooze | Mute)
    verb = text.split()[0]
    assert parse_reply(f"{verb} {format_duration(directive.duration)}").directive == directive


def test_help_text() -> None:
    plain = help_text(False)
    assert plain.count("\n") == 0
    for word in ("ack", "snooze 1h", "mute 1d", "resolve", "#12"):
        assert word in plain
    assert "daily" not in plain
    with_cron = help_text(True)
    assert with_cron.startswith(plain)
    assert "weekly" in with_cron and "at 07:30" in with_cron
    assert len(help_text(True, has_pulse=True).splitlines()) == 3


def test_help_text_options_parse() -> None:
    """Every option the help text advertises must itself parse as a directive."""
    for option in ("ack", "snooze 1h", "mute 1d", "resolve", "daily", "every 2h", "at 07:30"):
        assert parse_reply(option).directive is not None, option
    assert parse_reply("pulse 12 per day").directive == SetPulseRate(12)


@pytest.mark.timeout(60)  # a watchdog against a quadratic blow-up, not a speed limit
def test_long_adversarial_input_is_parsed() -> None:
    """The figure: python bench/bench_directives.py."""
    texts = ["snooze " + "1m" * 5000 + "x", "#1 " * 3000, "every " + "1" * 10000, "a" * 50000]
    for text in texts:
        assert parse_reply(text).directive is None, text[:20]
