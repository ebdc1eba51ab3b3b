"""Issue 32, item 4: cron that says what it will do.

Both day fields restricted (``0 17 25-31 * 5``) is valid cron and is kept, but cron's
OR rule is said plainly, in the tool's answer and wherever the job is described. A
field croniter cannot read is refused naming the field and forms that work (``5L``,
"last Friday": ``L5``, or every Friday with a check in the instruction). A run whose
answer is empty sends nothing, and the tool says so.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent.app.application import App
from agent.tools.cron import MANAGE_CRONJOB
from scheduler.cron.expression import (
    CronError,
    day_rule_warning,
    describe,
    next_fires,
    validate_cron,
)
from tests.contexts import owner_ctx
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.scripted import ScriptedModel
from tests.scheduling_kit import call_tool, parts_of, scheduled_app

NOW = datetime(2026, 11, 26, 14, 0, tzinfo=BERLIN)  # Thursday
QUOTED = re.compile(r"'((?:\S+ ){4}\S+)'")
"""A five-field expression in quotes, as the messages offer them."""


def days(expression: str, count: int = 6) -> list[str]:
    return [f"{fire:%a %d %b}" for fire in next_fires(expression, BERLIN, NOW, count)]


# -- the OR rule -----------------------------------------------------------------------------
def test_both_day_fields_are_kept_and_the_or_rule_is_said() -> None:
    expression = "0 17 25-31 * 5"
    assert validate_cron(expression) == expression
    # what cron does: every day from the 25th, and every Friday
    assert days(expression) == [
        "Thu 26 Nov", "Fri 27 Nov", "Sat 28 Nov", "Sun 29 Nov", "Mon 30 Nov", "Fri 04 Dec",
    ]  # fmt: skip
    warning = day_rule_warning(expression)
    assert warning is not None
    assert "OR rule" in warning and "days 25-31 of the month and also on every Friday" in warning
    assert "not only on days matching both" in warning
    assert "'0 17 * * 5'" in warning and "The last Friday of each month is '0 17 * * L5'" in warning
    assert describe(expression) == (
        "0 17 25-31 * 5: on days 25-31 of the month and also on every Friday at 17:00 "
        "(cron's OR rule: either day matches)"
    )
    for pattern in QUOTED.findall(warning):  # every pattern offered is one that works
        validate_cron(pattern)


@pytest.mark.parametrize(
    ("expression", "hint"),
    [
        ("0 9 1-7 * mon", "The 1st Monday of each month is '0 9 * * 1#1'"),
        ("0 9 15-21 * 2", "The 3rd Tuesday of each month is '0 9 * * 2#3'"),
        ("0 9 15 * 1-5", "keep only day-of-week ('0 9 * * 1-5')"),
        ("0 9 */2 * 1", "days */2 of the month and also on every Monday"),
    ],
)
def test_the_warning_offers_what_was_likely_meant(expression: str, hint: str) -> None:
    warning = day_rule_warning(expression)
    assert warning is not None and hint in warning


@pytest.mark.parametrize(
    "expression", ["0 17 * * 5", "0 17 25 * *", "0 17 ? * 5", "0 17 1 * ?", "@weekly", "bad"]
)
def test_one_day_field_has_no_warning(expression: str) -> None:
    assert day_rule_warning(expression) is None


def test_the_last_and_nth_weekday_forms_work_and_read_as_words() -> None:
    assert days("0 17 * * L5", 3) == ["Fri 27 Nov", "Fri 25 Dec", "Fri 29 Jan"]
    assert days("0 17 * * 5#3", 2) == ["Fri 18 Dec", "Fri 15 Jan"]
    assert describe("0 17 * * L5") == "on the last Friday of every month at 17:00"
    assert describe("0 17 * * 5#3") == "on the 3rd Friday of every month at 17:00"
    assert describe("0 17 L * *") == "on the last day of every month at 17:00"
    assert describe("0 17 ? * 5") == "every Friday at 17:00"


# -- unsupported syntax names the field and what works --------------------------------------
@pytest.mark.parametrize(
    ("expression", "field", "works"),
    [
        ("0 17 * * 5L", "day-of-week field '5L'", ["0 17 * * L5", "0 17 * * 5"]),
        ("0 17 * * friL", "day-of-week field 'friL'", ["0 17 * * L5", "0 17 * * 5"]),
        ("30 8 * * 7L", "day-of-week field '7L'", ["30 8 * * L0", "30 8 * * 0"]),
        ("0 17 LW * *", "day-of-month field 'LW'", []),
        ("0 17 L-2 * *", "day-of-month field 'L-2'", []),
        ("0 17 * * fri#L", "day-of-week field 'fri#L'", []),
    ],
)
def test_unsupported_syntax_names_the_field_and_a_pattern_that_works(
    expression: str, field: str, works: list[str]
) -> None:
    with pytest.raises(CronError) as caught:
        validate_cron(expression)
    message = str(caught.value)
    assert field in message and "unsupported syntax in one of the fields" not in message
    offered = QUOTED.findall(message)
    for pattern in works:
        assert pattern in offered
    if "day-of-month" in field:
        assert "L (the last day)" in message
    elif not works:
        assert "L5 (the last Friday)" in message and "5#3 (the third Friday)" in message
    for pattern in offered:  # the expression itself first, then what works
        if pattern != expression:
            validate_cron(pattern)


def test_last_friday_in_5l_says_to_check_the_date_in_the_instruction() -> None:
    with pytest.raises(CronError) as caught:
        validate_cron("0 17 * * 5L")
    assert "have the instruction check that it is the last Friday of the month" in str(caught.value)


# -- through the tool and the runner ---------------------------------------------------------
@pytest.fixture
async def app(app_db: AppDb, tmp_path: Path) -> AsyncIterator[App]:
    clock = FakeClock(NOW.astimezone(UTC))
    model = ScriptedModel(lambda _r: " \n ")  # every run answers with nothing to say
    channel = RecordingChannel()
    async with scheduled_app(
        app_db, tmp_path, model, clock, channels=[channel], timezone="Europe/Berlin"
    ) as built:
        yield built


async def _tool(app: App, **args: Any) -> dict[str, Any]:
    ctx = owner_ctx(app.deps, channel="console", chat_id="owner")
    return await call_tool(app, "manage_cronjob", ctx, **args)  # type: ignore[no-any-return]


async def test_the_tool_keeps_the_job_and_warns_of_the_or_rule(app: App) -> None:
    answer = await _tool(
        app, action="create", name="Pay day", instruction="remind", cron_expression="0 17 25-31 * 5"
    )
    assert answer["warning"] == day_rule_warning("0 17 25-31 * 5")
    job_id = answer["created"]["job_id"]
    listed = await _tool(app, action="list")
    shown = " ".join(str(value) for value in listed["jobs"][0].values())
    assert "cron's OR rule: either day matches" in shown
    plain = await _tool(app, action="update", job_id=job_id, cron_expression="0 17 * * L5")
    assert "warning" not in plain
    assert "on the last Friday of every month at 17:00" in " ".join(
        str(value) for value in plain["updated"].values()
    )
    again = await _tool(app, action="update", job_id=job_id, cron_expression="0 9 1-7 * 1")
    assert "1#1" in again["warning"]


async def test_the_tool_refuses_5l_naming_the_field(app: App) -> None:
    answer = await _tool(
        app, action="create", name="Last Friday", instruction="x", cron_expression="0 17 * * 5L"
    )
    assert "day-of-week field '5L'" in answer["error"] and "'0 17 * * L5'" in answer["error"]
    assert await app.deps.db["cronjobs"].count_documents({}) == 0


async def test_a_run_with_an_empty_answer_sends_nothing(app: App) -> None:
    assert "an empty answer sends nothing" in MANAGE_CRONJOB.spec().description
    created = await _tool(
        app, action="create", name="Disk check", instruction="df", cron_expression="5 14 * * *"
    )
    assert "created" in created
    clock = app.deps.clock
    assert isinstance(clock, FakeClock)
    clock.set(datetime(2026, 11, 26, 14, 5, 1, tzinfo=BERLIN))
    await parts_of(app).engine.run_due()
    run = await app.deps.db["runs"].find_one({"kind": "cron"})
    assert run is not None and run["status"] == "success" and run["delivery"] is None
    assert await app.deps.db["outbox"].count_documents({}) == 0
    channel = app.deps.channels["console"]
    assert isinstance(channel, RecordingChannel) and channel.sent == []


def test_a_fire_time_in_another_zone_is_unchanged_by_the_day_rule() -> None:
    """The OR rule is about days only: fires stay on the job's own clock."""
    tokyo = ZoneInfo("Asia/Tokyo")
    fires = next_fires("0 17 25-31 * 5", tokyo, NOW, 2)
    assert [f"{fire:%d %H:%M}" for fire in fires] == ["27 17:00", "28 17:00"]
