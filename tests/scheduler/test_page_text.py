"""How a page is read, for ``fetch_url`` and ``change`` monitors alike
(``scheduler.monitors.page``): readable text, the parts a selector names, the selector
subset, and hostile markup read in linear time.

The standard library's HTML parser rescans the rest of a page from every ``<`` that no
``>`` ends (100 KB of ``<x <x ...`` took six minutes, blocking the event loop); pages
are ``tame``d first.
"""

from __future__ import annotations

import time

import pytest

from scheduler.monitors.page import readable, selected
from scheduler.monitors.select import SelectorError, parse_selector

PAGE = (
    "<!DOCTYPE html><html><head><title>Shop</title></head><body><!-- a comment -->"
    "<main id='main'><div class='price now'>249.00 <b>EUR</b><br><img src=x></div>"
    "<ul><li>one<li>two</ul><p class='note'>if a<b then</p></main>"
    "<aside><div class='price'>99.00 EUR</div></aside></body></html>"
)


def test_a_selector_keeps_only_the_parts_it_names() -> None:
    def part(selector: str) -> str | None:
        return selected(PAGE, parse_selector(selector))

    assert part(".price.now") == "249.00 EUR"
    assert part("div.price") == "249.00 EUR\n\n99.00 EUR"  # every match, one per line
    assert part("#main .price") == "249.00 EUR"
    assert part("aside  .price") == "99.00 EUR"
    assert part("main li") == "one\n\ntwo"  # a second <li> closes the first
    assert part("p.note") == "if a<b then"  # a stray < is text, as a browser shows it
    assert part("#nowhere") is None and part("aside .now") is None
    quoted = "<p><a title='a > b' class='price'>12 EUR</a> more</p>"
    assert selected(quoted, parse_selector("p .price")) == "12 EUR"
    assert readable(quoted, True)[1] == "12 EUR more"
    title, text = readable(PAGE, True)
    assert title == "Shop" and "a comment" not in text and "DOCTYPE" not in text
    assert text.splitlines()[0] == "249.00 EUR"


@pytest.mark.parametrize(
    "selector", ["ul > li", "a + b", "a ~ b", "[href]", "a:hover", "a, b", "..x", "#", "a" * 201]
)
def test_selectors_outside_the_subset_are_refused(selector: str) -> None:
    with pytest.raises(SelectorError) as refused:
        parse_selector(selector)
    said = str(refused.value)
    assert "use tag, #id, .class" in said or "at most 200" in said, said


def test_hostile_markup_is_read_in_linear_time() -> None:
    hostile = [  # 500 KB each
        "<x " * 170_000,  # a tag that never ends, again and again
        "<a" * 250_000,
        "</" * 250_000,
        "<?" * 250_000,
        "<![CDATA[>" * 50_000,  # a marked section that never ends
        "<" * 500_000,
        "<div>" * 100_000 + "<span class='price'>1</span>",  # nesting past any stack
        "<!--" + "x" * 500_000,  # a comment that never ends
        "<a href='" + "x" * 500_000,  # an attribute that never ends
    ]
    deep = parse_selector("main div .price")
    for body in hostile:
        started = time.monotonic()
        readable(body, True)
        selected(body, deep)
        assert time.monotonic() - started < 30, body[:20]  # a watchdog: about 1 s here
