"""The Spend charts' date labels on a phone: readable, apart, not run together
(issue 39, item 9)."""

from __future__ import annotations

import itertools

from tests.agent.app.dashboard.browser_kit import Browser
from tests.agent.app.dashboard.conftest import TOKEN
from tests.fakes.alert_app import Harness

LABELS = """
const dated = /^\\d\\d \\w{3}$/;
return [...document.querySelectorAll(arguments[0] + ' text')]
  .filter(t => dated.test(t.textContent.trim()) && getComputedStyle(t).display !== 'none')
  .map(t => { const r = t.getBoundingClientRect(); return [r.left, r.right, r.height]; });
"""
MIN_GAP = 8
"""CSS pixels between two date labels."""
MIN_HEIGHT = 9
"""CSS pixels of a label's height: smaller is not read on a phone."""


async def labels(browser: Browser, chart: str) -> list[list[float]]:
    found = await browser.script(LABELS, chart)
    return sorted(found)


async def test_date_labels_stay_apart_and_readable(browser: Browser, dash: Harness) -> None:
    await browser.log_in(TOKEN)
    for size in ("desktop", "phone"):
        if size == "phone":
            await browser.phone()
        await browser.get("/spend")
        for chart in (
            'svg[aria-labelledby="spend-input-title"]',
            'svg[aria-labelledby="spend-output-title"]',
        ):
            shown = await labels(browser, chart)
            assert 2 <= len(shown) <= (6 if size == "desktop" else 4), (size, shown)
            for (_l, right, _h), (left, _r, _h2) in itertools.pairwise(shown):
                assert left - right >= MIN_GAP, (size, shown)
            assert min(h for _l, _r, h in shown) >= MIN_HEIGHT, (size, shown)
