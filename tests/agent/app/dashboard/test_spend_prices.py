"""Issue 30, item 4: what the tokens cost. The Spend page and ``/status`` show USD by the
price table (``$0.0012`` style), a model missing from it marked estimated, an owner's
override applied, and the day's budget: used, limit, when it resets."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from agent.app.application import App
from agent.spend.prices import load_prices, save_prices
from channels.delivery.envelope import Envelope
from storage.repos.prices import Price
from tests.agent.app.dashboard.pages_kit import AUTH, NOW, client_of, csrf_of, dash_app, page
from tests.databases import AppDb
from tests.fakes.clock import FakeClock
from tests.scheduling_kit import inbound

pytestmark = pytest.mark.clock(NOW)


async def _spend(app: App) -> None:
    """Three model calls today, counted the way the loop counts them."""
    budget = app.deps.budget
    await budget.record("chat", "gpt-4.1-mini", 1_000_000, 100_000, first=True)  # $0.56
    await budget.record("pulse", "my-local", 1_000, 0, first=True)  # default $2/M: ~$0.0020
    await budget.record("cron", "", 300, 100, first=True)  # no model: as kept before


async def _status(app: App) -> str:
    replies = await app.dispatcher.handle(Envelope(inbound("/status")))
    return "\n".join(r.text for r in replies)


async def test_the_spend_page_shows_usd_and_marks_estimates(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        await _spend(app)
        async with client_of(app) as client:
            text = await page(client, "/spend")
    costs = dict(
        re.findall(
            r'<tr data-kind="(\w+)">.*?<td class="cost"[^>]*>(?:<strong>)?([^<]+)<', text, re.S
        )
    )
    assert costs == {"chat": "$0.5600", "cron": "~$0.0014", "pulse": "~$0.0020", "all": "~$0.5634"}
    models = re.findall(
        r'<tr data-model="([^"]*)"><th scope="row">([^<]+)(<span[^>]*>estimated)?', text
    )
    assert [(m, label.strip(), bool(est)) for m, label, est in models] == [
        ("gpt-4.1-mini", "gpt-4.1-mini", False),
        ("my-local", "my-local", True),
        ("", "(unknown)", True),
    ]
    day = re.search(r'<tr data-day="2026-11-26">.*?<td class="cost"[^>]*>([^<]+)<', text, re.S)
    assert day is not None and day.group(1) == "~$0.5634"
    assert 'data-used="1101400" data-limit="1000000"' in text
    assert "budget spent" in text and "resets 00:00" in text
    today = text[text.index("<h2>Today</h2>") : text.index("</section>")]
    assert "<strong>~$0.5634</strong> so far today" in today  # dollars beside the tokens
    assert "(estimated: a model is not in the price table)" in today
    assert "1,101,400 of 1,000,000 tokens" in today


async def test_status_shows_the_budget_and_the_cost_today(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        text = await _status(app)
        assert "Tokens today: 0 of 1,000,000 (0%), $0.00; resets 00:00 Europe/Berlin" in text
        await _spend(app)
        text = await _status(app)
        assert "Tokens today: 1,101,400 of 1,000,000 (110%), ~$0.5634 (estimated: " in text
        assert "(unknown), my-local not priced); resets 00:00 Europe/Berlin" in text
        assert "Budget spent: chats answer without the model, runs are skipped" in text
        assert "DAILY_TOKEN_BUDGET in .env" in text
        await save_prices(app.deps.db, {"my-local": {"input": 0, "output": 0}}, default=None)
        text = await _status(app)
        assert "~$0.5614 (estimated: (unknown) not priced)" in text
        async with client_of(app) as client:  # the same figures for scripts and monitors
            budget = (await (await client.get("/api/status", headers=AUTH)).json())["budget"]
    assert budget == {
        "day": "2026-11-26",
        "used": 1_101_400,
        "limit": 1_000_000,
        "spent": True,
        "resets_at": "2026-11-27T00:00:00+01:00",
        "timezone": "Europe/Berlin",
        "usd": 0.5614,
        "estimated": ["(unknown)"],
    }


async def test_a_price_set_on_the_page_is_used_and_a_bad_one_refused(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        await _spend(app)
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/spend"))

            async def post(**form: str) -> str:
                resp = await client.post(
                    "/spend/prices", data={"csrf": csrf, **form}, headers=AUTH,
                    allow_redirects=False,
                )  # fmt: skip
                assert resp.status == 303
                return html.unescape(await page(client, "/spend"))

            text = await post(model="My-Local", input="$0.50", output="1.5")
            assert "Priced my-local at $0.5 in / $1.5 out per million tokens." in text
            assert '<tr data-model="my-local"><th scope="row">my-local</th>' in text  # priced
            assert "0.5 / 1.5" in text
            text = await post(model="gpt-4.1-mini", input="cheap", output="1")
            assert "Nothing changed: input price of 'gpt-4.1-mini' must be a number" in text
            text = await post(model="x", input="1", output="-2")
            assert "Nothing changed: output price of 'x' is -2.0: give USD per million" in text
            text = await post(model=" ", input="1", output="2")
            assert "Nothing changed: name the model (or 'default'" in text
            text = await post(model="default", input="0", output="0")
            assert "Priced default at $0 in / $0 out" in text
            # Cached input at its own price; left blank, a listed model keeps its own.
            text = await post(model="my-local", input="0.5", output="1.5", cached="0.05")
            assert "Priced my-local at $0.5 in / $1.5 out / $0.05 cached in per million" in text
            assert "0.5 / 1.5 <span" in text and "(0.05 cached)</span>" in text
            text = await post(model="gpt-4o", input="3", output="12", cached="")
            assert "Priced gpt-4o at $3 in / $12 out / $1.25 cached in per million" in text
            text = await post(model="gpt-4o", input="3", output="12", cached="lots")
            assert "Nothing changed: cached price of 'gpt-4o' must be a number" in text
            anonymous = await client.post(
                "/spend/prices", data={"model": "a", "input": "1", "output": "1"},
                headers=AUTH, allow_redirects=False,
            )  # fmt: skip
            assert anonymous.status == 403  # no CSRF field: refused
        table = await load_prices(app.deps.db)
    assert table.price_of("my-local") == (Price(0.5, 1.5, 0.05), False)
    assert table.prices["gpt-4o"] == Price(3.0, 12.0, 1.25)
    assert table.default == Price(0.0, 0.0) and "x" not in table.prices and "a" not in table.prices
    assert table.prices["gpt-4.1-mini"] == Price(0.40, 1.60, 0.10)  # the list price still
