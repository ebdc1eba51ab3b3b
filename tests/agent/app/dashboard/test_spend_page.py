"""The Spend page: tokens per day for 30 days by chat, cron and pulse, with totals; and the
per-exchange count in ``usage`` that feeds it."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from channels.delivery.envelope import Envelope
from storage.sandbox.rules import SandboxError, check_writable
from tests.agent.app.dashboard.pages_kit import BERLIN, NOW, client_of, dash_app, page
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.scheduling_kit import inbound, parts_of

DAY_GROUP = re.compile(r'<g class="day" data-day="([\d-]+)" data-total="(\d+)">')
SEGMENT = re.compile(r'<rect class="seg seg-(\w+)" data-kind="\w+" data-value="(\d+)"')


pytestmark = pytest.mark.clock(NOW)


def _chart(text: str, side: str) -> str:
    start = text.index(f'aria-labelledby="spend-{side}-title"')
    return text[start : text.index("</svg>", start)]


async def test_thirty_days_by_kind_with_zero_days_and_totals(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    today = NOW.date()
    async with dash_app(app_db, tmp_path, clock) as app:
        usage = app.deps.usage
        usage.add(today, "chat", 1000, 200)
        usage.add(today, "chat", 500, 100)
        usage.add(today, "pulse", 3000, 300)
        usage.add(today - timedelta(days=3), "cron", 700, 70)
        usage.add(today - timedelta(days=29), "chat", 40, 4)
        usage.add(today - timedelta(days=30), "chat", 99_999, 9_999)  # too old
        async with client_of(app) as client:
            text = await page(client, "/spend")
    inputs = _chart(text, "input")
    days = DAY_GROUP.findall(inputs)
    assert len(days) == 30 and days[0][0] == "2026-10-28" and days[-1][0] == "2026-11-26"
    totals = dict(days)
    assert totals["2026-11-26"] == "4500" and totals["2026-11-23"] == "700"
    assert totals["2026-10-28"] == "40" and totals["2026-11-25"] == "0"  # a day with none
    assert sum(t == "0" for t in totals.values()) == 27
    assert SEGMENT.findall(inputs) == [("chat", "40"), ("cron", "700"), ("chat", "1500"),
                                       ("pulse", "3000")]  # fmt: skip
    assert SEGMENT.findall(_chart(text, "output"))[-2:] == [("chat", "300"), ("pulse", "300")]
    cells = r"<td[^>]*>([\d,]+)</td><td[^>]*>([\d,]+)</td><td[^>]*>(?:<strong>)?([\d,]+)"
    row = re.compile(r'<tr data-kind="(\w+)">.*?' + cells, re.S)
    assert row.findall(text) == [
        ("chat", "1,540", "304", "1,844"),
        ("cron", "700", "70", "770"),
        ("pulse", "3,000", "300", "3,300"),
        ("all", "5,240", "674", "5,914"),
    ]
    assert text.count('<tr data-day="') == 3  # the days with spend; the rest folded:
    assert 'data-days="25"' in text and 'data-days="2"' in text
    assert "99,999" not in text


async def test_each_exchange_counts_its_tokens_on_the_owner_day(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    clock.set(NOW.replace(hour=0, minute=20))  # 23:20 UTC the day before: Berlin's day counts
    async with dash_app(app_db, tmp_path, clock) as app:
        await app.dispatcher.handle(Envelope(inbound("hi")))
        await app.dispatcher.handle(Envelope(inbound("and again")))
        await parts_of(app).jobs.create(
            name="Ping", instruction="Say ping", cron_expression="30 0 * * *",
            timezone="Europe/Berlin",
        )  # fmt: skip
        clock.set(NOW.replace(hour=0, minute=30, second=1))
        await parts_of(app).engine.run_due()
        counts = await app.deps.usage.since(NOW.date() - timedelta(days=1))
        run = await app.deps.db["runs"].find_one({"kind": "cron"})
    by_kind = {(c.day, c.kind): (c.input, c.output, c.exchanges) for c in counts}
    assert by_kind == {
        (NOW.astimezone(BERLIN).date(), "chat"): (20, 10, 2),  # 10 in / 5 out per model call
        (NOW.astimezone(BERLIN).date(), "cron"): (10, 5, 1),
    }
    assert run is not None and run["tokens"] == {"input": 10, "output": 5, "cached_input": 0}


def test_usage_is_protected_from_db_query_writes() -> None:
    with pytest.raises(SandboxError, match="'usage' is protected"):
        check_writable("usage")
