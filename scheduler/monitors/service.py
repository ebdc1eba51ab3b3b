"""The monitors service: checks that run without the model (``manage_monitor``, ``/api/monitors``).

Three kinds. ``http``: a GET of ``url`` every ``interval_seconds`` on a new connection;
up when it answers ``expect_status`` (default any 2xx or 3xx) within the timeout and,
with a ``keyword``, its body holds it. ``heartbeat``: something outside pings
``/ping/<token>``; down once ``period_seconds`` plus ``grace_seconds`` pass without a
ping (counted from the last ping stored, or the creation or resume if later), or at
once on ``/ping/<token>/fail``, as Healthchecks.io does. ``change``: a page fetched
every ``interval_seconds`` (at least five minutes) whose text, or the part a selector or
keyword names, is compared with the last seen (``scheduler.monitors.change``); fetched
like an http check, and down the same way when it cannot be.

The state of each monitor lives in its document in ``monitors`` (this module owns the
collection), so a restarted process carries on where the last one stopped:

1. What the owner was told is stored beside the state (``told``, with the code of the
   alert raised): a restart never raises a second alert for a monitor already down,
   and a heartbeat's deadline is counted from the ping stored, not from the start of
   the process.
2. A change of state is stored first, then told (``Hooks``), then stored as told: a
   crash in between tells it at the next review, and telling twice is harmless (the
   alert goes under the dedupe key ``monitor:<id>``, which the router counts rather
   than sends; the way back up is sent under an idempotency key). What is told, and
   when, is damped (``scheduler.monitors.news``): a flapping monitor makes one alert,
   and a monitor makes at most one message per five minutes.
3. Every change of state is a compare-and-set on the stored state, so two processes
   checking the same monitor (``watchkeeper chat`` beside ``watchkeeper run``) make one
   transition; a heartbeat is declared down only if its stored last ping is still the
   one the deadline was counted from.
4. A heartbeat's ping token is stored as its hash only: the token is in the answer to
   ``create`` and nowhere else (not in ``db_query``, a list or the API).
5. At most ``max_monitors``, however many creates run at once: each monitor holds a
   numbered slot below the cap, one per slot by a unique index.

What to do when a monitor goes down or comes back is given as ``Hooks`` (the alert
router's side, in ``agent.app.features.monitors``): this package never imports the agent.
Nothing here calls a model.
Why a check failed is ours, or what the site sent (``HTTP/1.1 2OO <anything>``): an
``Outside``, stored and quoted as the site's words wherever it goes.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import aiohttp

from runtime.clock import Clock
from runtime.tasks import stop_task, wait_event
from scheduler.monitors.change import Changed, PageNews, PageWatch
from scheduler.monitors.check import check_http, down_for_text
from scheduler.monitors.news import flap_text, news, noted, recent
from scheduler.monitors.store import MonitorStore
from storage.repos.monitor_checks import CheckHistory
from storage.repos.monitor_record import Monitor, Reason, Word, stored_time, token_key

log = logging.getLogger(__name__)


async def _unsaid(monitor: Monitor, news: PageNews) -> str | None:
    return None


@dataclass(frozen=True)
class Hooks:
    """What happens outside the scheduler when a monitor changes state."""

    down: Callable[[Monitor, Reason], Awaitable[str | None]]
    """Raise the alert for ``monitor``, down for ``reason``; returns its code."""
    up: Callable[[Monitor, timedelta], Awaitable[None]]
    """``monitor`` (as it was while down) is up again after the given time: resolve
    its alert and tell the owner. Must be safe to run twice."""
    cleared: Callable[[Monitor, str], Awaitable[None]]
    """``monitor``'s alert is to close, unsaid (the reason: paused, deleted, flapping,
    settled)."""
    flapping: Callable[[Monitor, str], Awaitable[str | None]]
    """Raise the one alert for ``monitor`` flapping (the text says how); its code."""
    changed: Changed = field(default=_unsaid)
    """Tell what a ``change`` monitor's page says now (``scheduler.monitors.change``)."""


@dataclass
class CheckStats:
    """How late http checks started and ended against their due time (for
    ``bench/bench_monitors.py``; a slow target makes ``done_max`` long, not us)."""

    checks: int = 0
    late_max: float = 0.0
    late_over_second: int = 0
    done_max: float = 0.0
    done_over_second: int = 0

    def record(self, late: float, done: float) -> None:
        self.checks += 1
        self.late_max, self.done_max = max(self.late_max, late), max(self.done_max, done)
        self.late_over_second += late > 1.0
        self.done_over_second += done > 1.0


@dataclass
class _Watch:
    revision: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Monitors:
    """Runs every monitor that is not paused, one task each (asyncio's timer heap does
    the scheduling), and answers the tool, the API and the pings."""

    def __init__(
        self,
        store: MonitorStore,
        hooks: Hooks,
        clock: Clock,
        *,
        watching: bool = True,
        history: CheckHistory | None = None,
    ) -> None:
        """``watching``: run the checks here. Only ``watchkeeper run`` does; a
        ``watchkeeper chat`` beside it edits and lists monitors, and ``run`` takes the
        changes up at its next read of the collection. ``history``: where each check
        is counted (``monitor_checks``; None: nowhere)."""
        self.store = store
        self.repo = store.repo
        self.history = history
        self.watching = watching
        self.limits = store.limits
        self._hooks = hooks
        self._now = clock
        self._session: aiohttp.ClientSession | None = None
        self._current: dict[str, Monitor] = {}
        self._tokens: dict[str, str] = {}
        """token_key -> monitor id, for the pings."""
        self._watches: dict[str, _Watch] = {}
        self._resync: asyncio.Task[None] | None = None
        self._reviews: asyncio.Task[None] | None = None
        self._reviewing: set[str] = set()
        """Monitors whose news is being told here now (told once, not twice at once)."""
        self._last_miss_reload = float("-inf")
        self._pages = PageWatch(store.repo, hooks.changed, hooks.cleared, clock)
        self.stats = CheckStats()

    def _clock(self) -> datetime:
        return stored_time(self._now())

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> int:
        """Load every monitor and start watching the active ones; returns how many."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=100),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        await self.repo.upgrade(self.limits.max_monitors)
        await self._load(spread=True)
        self._resync = asyncio.create_task(self._resync_loop(), name="monitors-resync")
        if self.watching:
            self._reviews = asyncio.create_task(self._review_loop(), name="monitors-news")
        return len(self._watches)

    async def stop(self) -> None:
        await stop_task(self._reviews)
        await stop_task(self._resync)
        self._resync = self._reviews = None
        watches, self._watches = list(self._watches.values()), {}
        await asyncio.gather(*(stop_task(watch.task) for watch in watches))
        if self._session is not None:
            await self._session.close()
        self._session = None

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.resync_seconds)
            try:
                await self._load(spread=False)
            except Exception:
                log.exception("monitors: reading the monitors again failed")

    async def _load(self, *, spread: bool) -> None:
        monitors = await self.repo.all()
        seen = {m.id for m in monitors}
        for gone in set(self._current) - seen:
            self._forget(gone)
            await self._unwatch(gone)
        active = {m.id: i for i, m in enumerate(m for m in monitors if not m.paused)}
        for monitor in monitors:
            known = self._current.get(monitor.id)
            self._remember(monitor)
            watch = self._watches.get(monitor.id)
            if monitor.paused:
                await self._unwatch(monitor.id)
            elif watch is None or watch.revision != monitor.revision:
                share = active[monitor.id] / len(active) if spread else 0.0
                await self._watch(monitor, share * (monitor.interval_seconds or 0))
            elif known != monitor:
                watch.wake.set()  # changed by another process (a ping): a new deadline

    def _remember(self, monitor: Monitor) -> None:
        self._current[monitor.id] = replace(monitor, token=None)  # shown once, at creation
        if monitor.token_key is not None:
            self._tokens[monitor.token_key] = monitor.id

    def _forget(self, monitor_id: str) -> None:
        monitor = self._current.pop(monitor_id, None)
        if monitor is not None and monitor.token_key is not None:
            self._tokens.pop(monitor.token_key, None)

    async def _watch(self, monitor: Monitor, delay: float = 0.0) -> None:
        await self._unwatch(monitor.id)
        if not self.watching:
            return
        watch = self._watches[monitor.id] = _Watch(monitor.revision)
        runs = self._heartbeat_loop if monitor.kind == "heartbeat" else self._http_loop
        watch.task = asyncio.create_task(runs(monitor.id, watch.wake, delay), name="monitor")

    async def _unwatch(self, monitor_id: str) -> None:
        watch = self._watches.pop(monitor_id, None)
        if watch is not None:
            await stop_task(watch.task)

    # -- what the tool and the API do --------------------------------------------------

    def all(self) -> list[Monitor]:
        return sorted(self._current.values(), key=lambda m: m.created_at)  # stable

    async def create(self, kind: Any, given: Mapping[str, Any]) -> Monitor:
        monitor = await self.store.create(kind, given)
        self._remember(monitor)
        await self._watch(monitor)
        log.info("monitor %s (%s) created", monitor.name, monitor.kind)
        return monitor

    async def update(self, monitor_id: Any, given: Mapping[str, Any]) -> Monitor:
        monitor = await self.store.update(monitor_id, given)
        self._remember(monitor)
        if not monitor.paused:
            await self._watch(monitor)
        return monitor

    async def pause(self, monitor_id: Any) -> Monitor:
        monitor = await self.repo.find(monitor_id)
        if monitor.paused:
            return monitor
        await self._unwatch(monitor.id)
        paused = await self.repo.set_paused(monitor, True)
        self._remember(paused)
        if monitor.alert_code is not None:
            await self._hooks.cleared(monitor, "paused")
        return paused

    async def resume(self, monitor_id: Any) -> Monitor:
        monitor = await self.repo.find(monitor_id)
        if not monitor.paused:
            return monitor
        resumed = await self.repo.set_paused(monitor, False)
        self._remember(resumed)
        await self._watch(resumed)
        return resumed

    async def delete(self, monitor_id: Any) -> Monitor:
        monitor = await self.repo.find(monitor_id)
        await self._unwatch(monitor.id)
        await self.repo.delete(monitor)
        self._forget(monitor.id)
        if self.history is not None:
            await self.history.forget(monitor.id)
        if monitor.alert_code is not None:
            await self._hooks.cleared(monitor, "deleted")
        return monitor

    async def ping(self, token: str, *, fail: bool = False) -> bool:
        """A heartbeat's ping; False for a token no monitor has (answered 404).

        Looked up by the token's hash in memory (only the hash is stored), the hashes
        then compared in constant time; an unknown token reads the database at most
        once every few seconds (a monitor made by another process), so a flood of
        guesses costs nothing."""
        key = token_key(token)
        monitor_id = self._tokens.get(key)
        if monitor_id is None:
            loop = asyncio.get_running_loop()
            if loop.time() - self._last_miss_reload < 5.0:
                return False
            self._last_miss_reload = loop.time()
            found = await self.repo.by_token_key(key)
            if found is None:
                return False
            self._remember(found)
            monitor_id = found.id
        monitor = self._current.get(monitor_id)
        if monitor is None or not hmac.compare_digest(monitor.token_key or "", key):
            return False
        now = self._clock()
        pinged = await self.repo.pinged(monitor.id, now)
        if pinged is None:  # deleted meanwhile
            return False
        self._remember(pinged)
        if not pinged.paused:
            await self._record(pinged, now, not fail)
            if fail:
                await self._down(pinged, now, "reported a failure (/fail)")
            else:
                await self._ok(pinged, now)
        watch = self._watches.get(monitor.id)
        if watch is not None:
            watch.wake.set()
        return True

    async def _record(
        self, monitor: Monitor, at: datetime, ok: bool, took: float | None = None
    ) -> None:
        """Count one check (or ping) in the history; ``took``: its seconds."""
        if self.history is not None:
            ms = None if took is None else round(took * 1000)
            await self.history.record(monitor.id, at, ok, ms)

    # -- the state machine -------------------------------------------------------------

    async def _ok(self, monitor: Monitor, at: datetime) -> None:
        if monitor.state == "down":
            changes = noted(monitor.changes, at, self.limits.damping)
            back = await self.repo.came_up(monitor, at, changes)
            if back is not None:
                log.info("monitor %s is up again", monitor.name)
                self._remember(back)
                await self._review(back)
                return
            monitor = await self.repo.reload(monitor.id) or monitor
        if monitor.state != "up" or monitor.failures or monitor.kind != "heartbeat":
            done = await self.repo.checked_ok(monitor, at)
            if done is None:  # down after all (another process): next check goes up
                done = await self.repo.reload(monitor.id)
            if done is not None:
                self._remember(done)

    async def _failed(self, monitor: Monitor, at: datetime, reason: Reason) -> None:
        counted = await self.repo.failed(monitor, at, reason)
        if counted is None:  # another process counted meanwhile: take its count
            counted = await self.repo.reload(monitor.id)
            if counted is None:
                return
        self._remember(counted)
        if counted.state != "down" and counted.failures >= counted.failures_before_alert:
            await self._down(counted, counted.failing_since or at, reason)

    async def _down(self, monitor: Monitor, since: datetime, reason: Reason) -> None:
        if monitor.state == "down":
            return
        changes = noted(monitor.changes, self._clock(), self.limits.damping)
        down = await self.repo.went_down(monitor, since, reason, changes)
        if down is None:
            self._remember(await self.repo.reload(monitor.id) or monitor)
            return
        log.warning("monitor %s is down: %s", monitor.name, reason)
        self._remember(down)
        await self._review(down)

    # -- what the owner is told (scheduler.monitors.news) --------------------------------

    async def _review(self, monitor: Monitor) -> None:
        """Tell the owner what is new about ``monitor``, if anything may be told now
        (module docstring, point 2); held news waits for ``_review_loop``."""
        now = self._clock()
        damping = self.limits.damping
        args = (monitor.state, monitor.told, monitor.told_at, monitor.changes, now, damping)
        word = None if monitor.paused else news(*args)
        if word is None or monitor.id in self._reviewing:
            return
        self._reviewing.add(monitor.id)
        try:
            code, since = await self._tell(monitor, word, now)
            told = await self.repo.told(monitor, word, code, now, since)
        finally:
            self._reviewing.discard(monitor.id)
        self._remember(told or await self.repo.reload(monitor.id) or monitor)

    async def _tell(
        self, monitor: Monitor, word: Word, now: datetime
    ) -> tuple[str | None, datetime]:
        """Say ``word`` through the hooks; the code of the alert left open, and since
        when what was said holds."""
        open_code = monitor.alert_code
        if word == "up":  # down for as long as it was; flapping until steady (now)
            back = monitor.changes[-1] if monitor.changes else now
            back = now if monitor.told == "flapping" else back
            since = monitor.told_since or back
            await self._hooks.up(replace(monitor, down_since=since), back - since)
            return None, back
        if open_code is not None:  # down and flapping are two alerts: one closes
            await self._hooks.cleared(monitor, "flapping" if word == "flapping" else "settled")
        if word == "flapping":
            text = flap_text(monitor.changes, now, self.limits.damping)
            seen = recent(monitor.changes, now, self.limits.damping)
            return await self._hooks.flapping(monitor, text), seen[0] if seen else now
        reason = monitor.last_error or "down"
        return await self._hooks.down(monitor, reason), monitor.down_since or now

    async def _review_loop(self) -> None:
        """Look at each monitor's held news again (too soon after the last message, or
        flapping until it settles): the real time between looks, the product's clock
        for what is due."""
        while True:
            await asyncio.sleep(self.limits.review_seconds)
            for monitor in list(self._current.values()):
                try:
                    await self._review(monitor)
                except Exception:
                    log.exception("monitor %s: telling the owner failed", monitor.name)

    # -- the loops ---------------------------------------------------------------------

    async def _http_loop(self, monitor_id: str, wake: asyncio.Event, delay: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        while True:
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            late = max(0.0, loop.time() - due)
            monitor = self._current.get(monitor_id)
            if monitor is None or self._session is None:
                return
            try:
                started = loop.time()
                limit = self.limits.timeout_seconds
                if monitor.kind == "change":
                    monitor, result = await self._pages.check(self._session, monitor, limit)
                else:
                    result = await check_http(self._session, monitor, limit)
                at = self._clock()
                await self._record(monitor, at, result.ok, loop.time() - started)
                if result.ok:
                    await self._ok(monitor, at)
                else:
                    await self._failed(monitor, at, result.reason)
            except Exception:  # the database away: the next check tries again
                log.exception("monitor %s: recording a check failed", monitor.name)
            self.stats.record(late, loop.time() - due)
            due += monitor.interval_seconds or 60
            due = max(due, loop.time())  # a check that overran starts the next at once

    async def _heartbeat_loop(self, monitor_id: str, wake: asyncio.Event, _: float) -> None:
        while True:
            monitor = self._current.get(monitor_id)
            if monitor is None:
                return
            deadline = monitor.deadline()
            if monitor.state == "down" or deadline is None:
                await wake.wait()
                wake.clear()
                continue
            left = (deadline - self._clock()).total_seconds()
            if left > 0:  # looked at again each second: the wall clock may jump (suspend)
                await wait_event(wake, min(left, 1.0))
                wake.clear()
                continue
            try:
                stored = await self.repo.reload(monitor_id)  # a ping another process had
                if stored is None:
                    return
                self._remember(stored)
                if stored.deadline() == deadline and stored.state != "down":
                    await self._record(stored, self._clock(), False)
                    await self._down(stored, deadline, _silence(stored, self._clock()))
            except Exception:
                log.exception("monitor %s: recording a missed ping failed", monitor.name)
            known = self._current.get(monitor_id)
            if known is not None and known.state != "down" and known.deadline() == deadline:
                await wait_event(wake, 1.0)  # not recorded down: no tight loop meanwhile
                wake.clear()


def _silence(monitor: Monitor, now: datetime) -> str:
    period = down_for_text(timedelta(seconds=monitor.period_seconds or 0))
    return f"no ping for {down_for_text(now - monitor.since())} (expected every {period})"
