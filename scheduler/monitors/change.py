"""``change`` monitors: a page's text compared with the text last seen, and the owner
told what changed, with no model call.

Each check fetches ``url`` the way ``fetch_url`` does (``scheduler.monitors.page``) and
takes its readable text, or only the parts ``selector`` names, or only about
``AROUND`` characters either side of ``keyword`` (with both, the keyword's
neighbourhood within those parts); whitespace is normalised, and the text's hash is
compared with the one stored:

1. The first good check stores the text as the baseline and says nothing.
2. Another text: the owner is told what changed, before and after, each at most
   ``SHOWN`` characters (the changed stretch with a few words either side), through
   ``Hooks.changed`` at the monitor's severity. Before and after are the page's words:
   an ``Outside``, quoted as the page's wherever they go.
3. A selector or keyword that finds nothing is told once (``page_found``), not at every
   check; found again with the same text, that alert is closed unsaid.
4. A page that cannot be fetched is a failed check, as for an http monitor (down after
   ``failures_before_alert``); a page that changed is never "down".

Told first, then stored (a compare-and-set on the hash): a crash in between tells it
again at the next check under the same dedupe key (``monitor-change:<id>:<hash>``),
which the alert router counts rather than sends. The stored copy of the text is its
first ``PAGE_KEPT`` characters (the hash covers all of it).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import aiohttp

from runtime.clock import Clock
from scheduler.monitors.check import Result
from scheduler.monitors.monitor import PAGE_BYTES, PAGE_KEPT, USER_AGENT
from scheduler.monitors.page import Page, PageError, get_page, readable, selected
from scheduler.monitors.select import SelectorError, parse_selector
from storage.outside import Outside
from storage.repos.monitor_record import Monitor, PageSeen, stored_time
from storage.repos.monitors import MonitorRepo

AROUND = 100
"""Characters kept either side of a keyword: its neighbourhood (about 200 in all)."""
SHOWN = 300
"""Characters of the before and of the after told to the owner, each."""
CONTEXT = 4
"""Unchanged words shown either side of what changed."""


@dataclass(frozen=True)
class PageNews:
    """What to tell the owner about a page: our ``title``, a ``body`` (the page's words
    when it quotes them), and the part of the alert's dedupe key that names it."""

    title: str
    body: str | Outside
    key: str


Changed = Callable[[Monitor, PageNews], Awaitable[str | None]]
"""Raise the alert for ``PageNews`` (closing the one ``monitor.change_code`` names, now
out of date); returns its code."""
Cleared = Callable[[Monitor, str], Awaitable[None]]


def normalised(text: str) -> str:
    """``text`` with each line's whitespace collapsed and empty lines dropped."""
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def part_of(page: Page, selector: str | None, keyword: str | None) -> str | None:
    """The text a monitor compares, normalised; None when its selector or keyword
    finds nothing."""
    if selector is not None:
        try:
            chosen = parse_selector(selector)
        except SelectorError:  # checked when stored: a damaged record matches nothing
            return None
        found = selected(page.body, chosen) if page.html else None
        if found is None:
            return None
        text = normalised(found)
    else:
        text = normalised(readable(page.body, page.html)[1])
    if keyword is None:
        return text
    at = text.replace("\n", " ").find(keyword)  # a keyword may span two lines
    if at < 0:
        return None
    return text[max(0, at - AROUND) : at + len(keyword) + AROUND]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def difference(before: str, after: str) -> tuple[str, str]:
    """What changed, as ``(before, after)``: the words from the first that differs to
    the last, with ``CONTEXT`` unchanged words either side, each cut to ``SHOWN``
    characters. Linear: a common start and end are taken off, nothing is searched."""
    old, new = before.split(), after.split()
    same = min(len(old), len(new))
    head = 0
    while head < same and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < same - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    start = max(0, head - CONTEXT)
    kept = min(tail, CONTEXT)

    def shown(words: list[str]) -> str:
        piece = " ".join(words[start : len(words) - tail + kept]) or "(nothing)"
        piece = ("… " if start else "") + piece + (" …" if tail > kept else "")
        return piece if len(piece) <= SHOWN else piece[: SHOWN - 1].rstrip() + "…"

    return shown(old), shown(new)


def looked_for(monitor: Monitor) -> str:
    """The part a monitor compares, in words: ``the selector '.price'``."""
    if monitor.selector is not None and monitor.keyword is not None:
        return f"the keyword {monitor.keyword!r} within the selector {monitor.selector!r}"
    if monitor.selector is not None:
        return f"the selector {monitor.selector!r}"
    return f"the keyword {monitor.keyword!r}"


class PageWatch:
    """Checks ``change`` monitors: fetch, compare, tell, store (module docstring)."""

    def __init__(self, repo: MonitorRepo, changed: Changed, cleared: Cleared, clock: Clock) -> None:
        self._repo = repo
        self._changed = changed
        self._cleared = cleared
        self._now = clock

    async def check(
        self, session: aiohttp.ClientSession, monitor: Monitor, seconds: float
    ) -> tuple[Monitor, Result]:
        """One check of ``monitor``: the monitor as it is now, and whether the page
        could be read (a failure is counted as an http monitor's is)."""
        assert monitor.url is not None
        try:
            page = await get_page(session, monitor.url, seconds, PAGE_BYTES, USER_AGENT)
        except PageError as exc:
            return monitor, Result(False, str(exc))
        # Parsed beside the event loop: a large page takes a second or more.
        part = await asyncio.to_thread(part_of, page, monitor.selector, monitor.keyword)
        return await self._compare(monitor, part), Result(True)

    async def _compare(self, monitor: Monitor, part: str | None) -> Monitor:
        if part is None:
            if not monitor.page_found:
                return monitor  # told once already
            code = await self._changed(monitor, self._missing(monitor))
            return await self._stored(monitor, PageSeen(found=False, change_code=code))
        hashed = digest(part)
        kept = Outside(part[:PAGE_KEPT], self._source(monitor))
        if monitor.page_hash is None or hashed == monitor.page_hash:
            if monitor.page_found and monitor.page_hash is not None:
                return monitor  # nothing new
            if not monitor.page_found and monitor.change_code is not None:
                await self._cleared(replace(monitor, alert_code=monitor.change_code), "found")
            seen = PageSeen(found=True, change_code=None, page_hash=hashed, page_text=kept)
            return await self._stored(monitor, seen)
        before = monitor.page_text.text if monitor.page_text is not None else ""
        code = await self._changed(monitor, self._news(monitor, before, part, hashed))
        changed_at = stored_time(self._now())
        seen = PageSeen(True, code, page_hash=hashed, page_text=kept, changed_at=changed_at)
        return await self._stored(monitor, seen)

    async def _stored(self, monitor: Monitor, seen: PageSeen) -> Monitor:
        done = await self._repo.page_seen(monitor, seen)
        return done or await self._repo.reload(monitor.id) or monitor

    @staticmethod
    def _source(monitor: Monitor) -> str:
        return f"the page at {monitor.url}"

    def _news(self, monitor: Monitor, before: str, after: str, hashed: str) -> PageNews:
        old, new = difference(before, after[:PAGE_KEPT])
        if old == new:  # only past the copy kept
            said = f"changed after its first {PAGE_KEPT} characters"
            return PageNews(f"{monitor.name} changed", f"{monitor.url}: {said}.", hashed)
        quoted = Outside(f"before: {old} → after: {new}", self._source(monitor))
        return PageNews(f"{monitor.name} changed", quoted, hashed)

    @staticmethod
    def _missing(monitor: Monitor) -> PageNews:
        which, verb = missing_words(monitor)
        body = (
            f"{monitor.url}: {looked_for(monitor)} {verb} on the page (its layout may have "
            "changed). I will tell you what it says once it is there again."
        )
        return PageNews(f"{monitor.name}: {which} {verb}", body, "missing")


def missing_words(monitor: Monitor) -> tuple[str, str]:
    """What found nothing and how it is said, while ``page_found`` is False:
    ``("selector", "no longer matches")``, ``("keyword", "finds nothing")``."""
    verb = "finds nothing" if monitor.page_hash is None else "no longer finds anything"
    if monitor.selector is not None and monitor.keyword is None:
        verb = "matches nothing" if monitor.page_hash is None else "no longer matches"
    return ("selector" if monitor.selector is not None else "keyword"), verb
