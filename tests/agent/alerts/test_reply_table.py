"""Issue #13's table: how owners really reply to alerts, and what each reply must do.

GoAlert's SMS forms (``1a``, ``1c``, ``1aa``, ``1cc``, ``ack 1``, ``close 1``, ``1 ack``,
quoted as its template "Reply '1a'" shows), PagerDuty's ``4``/``6`` (not ours: a bare
number could as well be a code, so the model gets them), natural replies with quotes,
emoji, zero-width spaces and ``ack'd``, durations, short acknowledgements, and replies
that name an alert the parser cannot apply. Each runs through the whole app (webhook
or chat channel, dispatcher, interceptor, router) from the same four open alerts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.agent.alerts.reply_table_kit import (
    ALL_FOUR,
    Applied,
    Asked,
    Case,
    Silent,
    Told,
    ToModel,
    ack,
    escalate,
    play,
    resolve,
    snooze,
)
from tests.databases import AppDb
from tests.fakes.alert_app import Harness, alert_app

NO_5 = Told("There is no alert #5.")
LATEST = ToModel("12")  # the latest alert attached, with "the owner did not name it"

CASES = [
    # GoAlert's forms: <code>a / <code>c, any case, with or without #, glued or spaced
    Case("1a", ack("1")),
    Case("1c", resolve("1")),
    Case("1A", ack("1")),
    Case("1C", resolve("1")),
    Case("12a", ack("12")),
    Case("12 c", resolve("12")),
    Case("1 a", ack("1")),
    Case("#12a", ack("12")),
    Case("#1 c", resolve("1")),
    Case("a1", ack("1")),
    Case("a 12", ack("12")),
    Case("c 1", resolve("1")),
    Case("c12", resolve("12")),
    # ... ack <code>, close <code>, <code> ack
    Case("ack 1", ack("1")),
    Case("ACK 12", ack("12")),
    Case("ack12", ack("12")),
    Case("ack#12", ack("12")),
    Case("ack #11", ack("11")),
    Case("acknowledge 12", ack("12")),
    Case("close 1", resolve("1")),
    Case("resolve 2", resolve("2")),
    Case("1 ack", ack("1")),
    Case("12 ack", ack("12")),
    Case("11 close", resolve("11")),
    Case("12 resolve", resolve("12")),
    Case("#2: ack", ack("2")),
    Case("1a", ack("1"), channel="sms"),
    # ... quoted, as GoAlert's template "Reply '1a'" invites
    Case("'1a'", ack("1")),
    Case("‘1c’", resolve("1")),
    Case('"2a"', ack("2")),
    Case("“ack”", ack("12")),
    Case("Reply '1a'", ToModel("1", "code")),
    # ... ack all / close all: asked first, in one line
    Case("1aa", Asked(f"Acknowledge all 4 alerts {ALL_FOUR}")),
    Case("1cc", Asked(f"Resolve all 4 alerts {ALL_FOUR}")),
    Case("100aa", Asked(f"Acknowledge all 4 alerts {ALL_FOUR}")),
    Case("12cc", Asked(f"Resolve all 4 alerts {ALL_FOUR} Send 12cc again")),
    Case("ack all", Asked(f"Acknowledge all 4 alerts {ALL_FOUR}")),
    Case("close all", Asked(f"Resolve all 4 alerts {ALL_FOUR}")),
    # PagerDuty's digits are not ours: "4" could be alert #4
    Case("4", LATEST),
    Case("6", LATEST),
    Case("6", LATEST, channel="sms"),
    # plain directives with the decorations phones add
    Case("ack", ack("12")),
    Case("ok", ack("12")),
    Case("OK.", ack("12")),
    Case("ack!!!", ack("12")),
    Case("done", resolve("12")),
    Case("Ack 👍", ack("12")),
    Case("resolved ✅", resolve("12")),
    Case("ack\u200b", ack("12")),
    Case("\u200b1a", ack("1")),
    Case("ack'd", ack("12")),
    Case("Ack’d!", ack("12")),
    Case("*1a*", ack("1")),
    Case("１２ａ", ack("12")),
    # durations: bare minutes, compounds, words, moments in the owner's zone (11:00 there)
    Case("snooze", snooze("12", "1h")),
    Case("snooze 30", snooze("12", "30m")),
    Case("snooze 1h30", snooze("12", "1h 30m")),
    Case("snooze 1h 30m", snooze("12", "1h 30m")),
    Case("snooze an hour", snooze("12", "1h")),
    Case("snooze half an hour", snooze("12", "30m")),
    Case("snooze two hours", snooze("12", "2h")),
    Case("snooze an hour and a half", snooze("12", "1h 30m")),
    Case("snooze for 45 minutes", snooze("12", "45m")),
    Case("snooze until 8am", snooze("12", "21h")),
    Case("snooze until tomorrow", snooze("12", "22h")),
    Case("snooze till noon", snooze("12", "1h")),
    Case("#1 snooze 2h", snooze("1", "2h")),
    Case("1 snooze 30", snooze("1", "30m")),
    Case("mute 1d", Applied("muted", "12", "1d")),
    Case("mute 2 hours #11", Applied("muted", "11", "2h")),
    Case("snooze 0m", Told("Snooze needs a duration from 1m to 30d, not 0m.")),
    Case("snooze until 8", LATEST),  # am or pm? not guessed
    # escalate / e [code]
    Case("e", escalate("12")),
    Case("escalate", escalate("12")),
    Case("e 1", escalate("1")),
    Case("1e", escalate("1")),
    Case("escalate #2", escalate("2")),
    # short acknowledgements: only as a reply to an alert
    Case("k", LATEST),
    Case("thx", LATEST),
    Case("👍", LATEST),
    Case("ok thanks", LATEST),
    Case("👍", ack("1"), reply_to="1"),
    Case("on it", ack("11"), reply_to="11"),
    Case("got it", ack("2"), reply_to="2"),
    Case("k", ack("12"), channel="sms"),
    Case("ok thanks", ack("12"), channel="sms"),
    Case("got it", ack("12"), channel="sms"),
    Case("thx", ack("12"), channel="sms"),
    Case("on it", ack("12"), channel="sms"),
    Case("👍", ack("12"), channel="sms"),
    Case("#1 👍", ack("1")),
    # an alert named but not applicable: the model gets that alert, and is told so
    Case("why?", ToModel("1", "reply"), reply_to="1"),
    Case("ack 1 please", ToModel("1", "code")),
    Case("what is #2 about?", ToModel("2", "code")),
    Case("1a 2a", ToModel("1", "code", also="#2")),
    Case("is alert 11 serious?", ToModel("11", "code")),
    Case("ack 11 and 12", ToModel("11", "code")),
    Case("#2 what happened?", ToModel("2", "code"), channel="sms"),
    # what used to be misread: codes are digits only
    Case("2fa", LATEST),
    Case("send me the 2fa code", LATEST),
    Case("pizza", LATEST),
    # unknown or conflicting codes are answered, not guessed
    Case("5a", NO_5),
    Case("ack 5", NO_5),
    Case("1a #2", Told("Found #2 and #1: reply about one alert at a time.")),
    # carrier keywords stay the carrier's
    Case("STOP", Silent(), channel="sms"),
    Case("help", Silent(), channel="sms"),
    Case("'Stop'", Silent(), channel="sms"),
]


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 80
    assert len({(c.text, c.channel, c.reply_to) for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
async def table_app(embedded_database: AppDb) -> AsyncIterator[Harness]:
    async with alert_app(embedded_database, timezone="Europe/Berlin") as h:
        yield h


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.channel}:{c.reply_to or ''}:{c.text!r}" for c in CASES]
)
async def test_reply(table_app: Harness, case: Case) -> None:
    await play(table_app, case)
