"""The Spend page's price form is bounded (issue 36): a 500 kB model name, a price typed
as a page of digits, a name with a newline in it, or one more model than the table
holds is refused with a clear line on the page, and nothing is stored."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from agent.spend.prices import load_prices, save_prices
from storage.repos.prices import MAX_MODEL_CHARS, MAX_PRICED_MODELS, PRICES_ID, Price
from tests.agent.app.dashboard.pages_kit import AUTH, NOW, client_of, csrf_of, dash_app, page
from tests.databases import AppDb
from tests.fakes.clock import FakeClock

pytestmark = pytest.mark.clock(NOW)


async def _post(client: TestClient[Any, Any], csrf: str, **form: str) -> str:
    """Post the price form; the Spend page it comes back to, as text."""
    resp = await client.post(
        "/spend/prices", data={"csrf": csrf, **form}, headers=AUTH, allow_redirects=False
    )
    assert resp.status == 303 and resp.headers["Location"] == "/spend"
    return html.unescape(await page(client, "/spend"))


async def test_a_huge_or_broken_model_name_is_refused_and_nothing_stored(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        settings = app.deps.db["settings"]
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/spend"))
            huge = "m" * 500_000
            text = await _post(client, csrf, model=huge, input="1", output="2")
            assert (
                f"Nothing changed: a model name is at most {MAX_MODEL_CHARS} characters; "
                "this one has 500,000." in text
            )
            assert len(text) < 100_000  # the name is not echoed back
            longest = "n" * MAX_MODEL_CHARS
            text = await _post(client, csrf, model=longest + "x", input="1", output="2")
            assert f"at most {MAX_MODEL_CHARS} characters; this one has 201" in text
            text = await _post(client, csrf, model="gpt\nevil", input="1", output="2")
            assert "Nothing changed: model name 'gpt\\nevil' holds a control character" in text
            assert await settings.find_one({"_id": PRICES_ID}) is None  # nothing stored
            text = await _post(client, csrf, model=longest, input="1", output="2")
            assert f"Priced {longest} at $1 in / $2 out per million tokens." in text
        assert (await load_prices(app.deps.db)).prices[longest] == Price(1.0, 2.0)


async def test_a_price_typed_past_its_length_is_refused(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    async with dash_app(app_db, tmp_path, clock) as app:
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/spend"))
            for side in ("input", "output", "cached"):
                form = {"model": "my-local", "input": "1", "output": "2", side: "1" + " " * 100_000}
                text = await _post(client, csrf, **form)
                assert f"Nothing changed: {side} price is at most 32 characters." in text
        assert await app.deps.db["settings"].find_one({"_id": PRICES_ID}) is None


async def test_the_table_of_the_owners_prices_is_bounded(
    app_db: AppDb, tmp_path: Path, clock: FakeClock
) -> None:
    full = {f"model-{n}": {"input": 1, "output": 2} for n in range(MAX_PRICED_MODELS)}
    async with dash_app(app_db, tmp_path, clock) as app:
        await save_prices(app.deps.db, full)
        async with client_of(app) as client:
            csrf = csrf_of(await page(client, "/spend"))
            text = await _post(client, csrf, model="one-more", input="1", output="2")
            assert (
                f"Nothing changed: at most {MAX_PRICED_MODELS} models can have a price "
                "of their own." in text
            )
            text = await _post(client, csrf, model="model-7", input="3", output="4")
            assert "Priced model-7 at $3 in / $4 out" in text  # re-pricing one still works
        table = await load_prices(app.deps.db)
        doc = await app.deps.db["settings"].find_one({"_id": PRICES_ID})
    assert "one-more" not in table.prices and table.prices["model-7"] == Price(3.0, 4.0)
    assert doc is not None and len(doc["models"]) == MAX_PRICED_MODELS
