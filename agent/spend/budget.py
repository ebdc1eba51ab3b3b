"""The daily token budget, the spend cap that holds, and what tokens cost in USD.

Budget (``TokenBudget``; ``DAILY_TOKEN_BUDGET``): input plus output tokens per budget
day, one cap for every process on the database (``watchkeeper chat`` beside ``run``).
Guarantees:

1. Reserved before, settled after. Before each model call its bound is reserved
   (``reserve``): the request's input estimated from its size (``request_bound``, on the
   high side) plus the most it may write (``MAX_OUTPUT_TOKENS``, which every adapter
   asks for). The reservation is one conditional update of the shared ledger
   (``storage.repos.token_budget``): it is let through only while the settled tokens
   plus every open reservation are below the cap, so however many chats, runs and
   processes call at once, the day ends at most one reservation past the cap. A call
   that finds the cap held by calls in flight (not spent) waits for them to settle. After
   the call its real usage replaces the reservation (``settle``); a failed call frees
   it (``release``); a process killed in between holds it at most ``hold_for`` (30 min,
   or longer for a long ``LLM_TIMEOUT_SECONDS``) after its last reservation.
2. One cap per real day, whatever the timezone does. The budget day is opened at the
   owner's midnight (their timezone then) and closes at the next one (``next_day``),
   and that close is stored with it: moving the timezone never opens a new day early,
   the tokens used stay counted until it closes. The day after a move starts when the
   old one closes and ends at a midnight of the new zone at least ``MIN_DAY`` later, so
   a move east (where the date is later) cannot make a short day and a second cap soon
   after. Its label (``day``; usage counts are kept under it) is the owner's date whose
   end closes it: today's, unless a move made the day run on.
3. At 80% the owner gets one info notice a day; at 100% one more, whether a chat, a
   pulse or a cron run met the cap. "Once" survives a restart: each notice is claimed
   by inserting ``<day>:budget:<level>`` into ``usage`` (a duplicate key: told before).
   When the cap was raised (and Watchkeeper restarted), the "spent" notice is resolved
   and its claim dropped.
4. At 100% no model call is made (0 = no cap, nothing reserved): a chat gets
   ``spent_reply`` (when it resets, how to raise it), a run is skipped. A call already
   made is counted, so a turn that crosses the cap finishes its round (the tools the
   model asked for) and stops before the next call.

On the hot path a model call costs two small database commands (reserve, settle); the
counts for the Spend page are still written in batches (``storage.repos.usage``).

Prices live in ``agent.spend.prices``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from agent.llm.types import (
    MAX_OUTPUT_TOKENS,
    MediaPart,
    ModelMessage,
    NotePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from runtime.clock import Clock
from storage import collections as c
from storage.repos.token_budget import Ledger, TokenLedger
from storage.repos.usage import UsageKind, UsageLog

log = logging.getLogger(__name__)

Level = Literal["warned", "spent"]
WARN_AT = 0.8
RAISE_HINT = "set DAILY_TOKEN_BUDGET in .env (0 = no cap) and restart Watchkeeper"
JOB_EFFECTS = ("manage_cronjob created", "manage_cronjob updated")
"""Effects (``effect_of``) that set a job to fire: one due before the reset is skipped
(a skipped one-time reminder does not come again), so the owner is told."""


Notify = Callable[[str, str, str], Awaitable[None]]
"""Tells the owner (title, body, key): an info alert, or a chat message without alerts."""
Unnotify = Callable[[str], Awaitable[None]]
"""The notice of ``key`` no longer holds: its alert, if still open, is resolved."""
Zone = Callable[[], tzinfo]

RESERVATION_TTL = timedelta(minutes=30)
"""How long a reservation counts unsettled, at least (``hold_for``): longer than one model
call may take with its retries and fallback, so only a reservation whose process died
(``kill -9`` during the call) stops counting, and the cap it held opens again after at
most this long."""
TRIES_PER_CALL = 10
"""``LLM_TIMEOUT_SECONDS`` times this bounds one call with its retries and fallback (4
tries of each provider, and the waits between): ``hold_for`` is at least that long."""


def reservation_ttl(llm_timeout_seconds: float) -> timedelta:
    """How long a reservation counts unsettled for this model timeout."""
    return max(RESERVATION_TTL, timedelta(seconds=llm_timeout_seconds * TRIES_PER_CALL))


MIN_DAY = timedelta(hours=20)
"""The shortest budget day after a timezone move (a day of summer-time change is 23 h)."""
WAIT_SECONDS = 0.25
"""How often a call waiting for the cap held by calls in flight looks again (another
process's calls settle without telling this one; this process's wake it at once)."""
BYTES_PER_TOKEN = 2
"""The input estimate: a token per two bytes of the request's text. Prose and code run
about 4 bytes a token, JSON 4, Chinese 3.9, emoji 2.5; only base64 and runs of
punctuation come close to 1.5, and the output bound covers that difference."""
IMAGE_TOKENS = 2_600
"""At most what one photo costs as input (OpenAI's high detail, Gemini's tiles)."""
AUDIO_TOKENS_PER_SECOND = 32
"""A voice note heard natively (Gemini); 5 minutes when its length is not known."""


def request_bound(
    system: str, messages: Iterable[ModelMessage], tools: Iterable[ToolSpec] = ()
) -> int:
    """The input tokens of a request, on the high side (``BYTES_PER_TOKEN``), without
    tokenising: it runs before every model call."""
    size = len(system.encode("utf-8", "replace"))
    tokens = 0
    for spec in tools:
        size += spec.request_bytes
    for message in messages:
        tokens += 4
        for part in message.parts:
            if isinstance(part, TextPart | NotePart):
                size += len(part.text.encode("utf-8", "replace"))
            elif isinstance(part, ToolCallPart):
                size += len(part.name) + len(json.dumps(part.arguments, default=str))
            elif isinstance(part, ToolResultPart):
                size += len(part.name) + len(json.dumps(part.result, default=str))
            elif isinstance(part, MediaPart):
                size += len(part.fallback_text().encode("utf-8", "replace"))
                if part.media_kind == "image":
                    tokens += IMAGE_TOKENS
                else:
                    tokens += AUDIO_TOKENS_PER_SECOND * (part.duration_s or 300)
    return tokens + math.ceil(size / BYTES_PER_TOKEN)


@dataclass(frozen=True)
class BudgetView:
    """The day's budget as ``/status`` and the dashboard show it."""

    day: date
    used: int
    limit: int
    resets_at: datetime

    @property
    def capped(self) -> bool:
        return self.limit > 0

    @property
    def spent(self) -> bool:
        return self.capped and self.used >= self.limit

    @property
    def share(self) -> float:
        return self.used / self.limit if self.capped else 0.0


@dataclass(frozen=True)
class Hold:
    """One model call's reservation on ``day`` (``tokens`` 0: nothing reserved, there is
    no cap)."""

    day: date
    tokens: int


def notice_key(day: date, level: Level) -> str:
    """The ``usage`` claim of a day's notice at ``level`` (its alert's key is
    ``budget:`` and this): told once a day, resolved by the same key."""
    return f"{day.isoformat()}:budget:{level}"


def next_midnight(day: date, tz: tzinfo) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(0), tz)


def next_day(now: datetime, zone: tzinfo, before: Ledger | None) -> tuple[date, datetime]:
    """The budget day open at ``now`` (its label and when it closes, in UTC) after
    ``before`` closed (None: none was ever open).

    It closes at the owner's next midnight (in ``zone``, their timezone now); its date
    comes after ``before``'s, and it lasts at least ``MIN_DAY`` from ``before``'s close,
    or a midnight later: a timezone moved east cannot start a second day soon after."""
    local = now.astimezone(zone).date()
    if before is None:
        return local, next_midnight(local, zone).astimezone(UTC)
    day = max(local, before.day + timedelta(days=1))
    ends = next_midnight(day, zone)
    while ends - before.ends < MIN_DAY:
        day += timedelta(days=1)
        ends = next_midnight(day, zone)
    return day, ends.astimezone(UTC)


def until(later: datetime, now: datetime) -> str:
    """``3 h 12 min``, ``40 min``, ``less than a minute``."""
    minutes = int((later - now).total_seconds() // 60)
    if minutes < 1:
        return "less than a minute"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


@dataclass
class TokenBudget:
    usage: UsageLog
    db: AsyncDatabase[dict[str, Any]]
    limit: int
    """Tokens a day; 0: no cap."""
    clock: Clock
    zone: Zone
    """The owner's timezone now (``OwnerSettings.tz``)."""
    notify: Notify
    max_output: int = MAX_OUTPUT_TOKENS
    """What one call may write at most (``MAX_OUTPUT_TOKENS``): reserved with its input."""
    hold_for: timedelta = RESERVATION_TTL
    """How long a reservation counts unsettled (``reservation_ttl``)."""
    unnotify: Unnotify | None = None
    """Resolves the "spent" notice when the day's budget is not spent any more (raised)."""
    _checked: set[date] = field(default_factory=set, init=False)
    """Days whose "spent" notice this process looked at (once each)."""
    _ledger: TokenLedger = field(init=False)
    _proc: str = field(default_factory=lambda: uuid.uuid4().hex, init=False)
    """This process's name in the ledger (its reservations, expired if it dies)."""
    _last: Ledger | None = field(default=None, init=False)
    """The ledger as this process last read or changed it."""
    _told: set[tuple[date, Level]] = field(default_factory=set, init=False)
    _settled: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _queue: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    """Calls waiting for the cap, one looking at a time."""

    def __post_init__(self) -> None:
        self._ledger = TokenLedger(self.db)

    def _seen(self) -> Ledger | None:
        """The budget day as last seen here, while it lasts (no read)."""
        last = self._last
        return last if last is not None and self.clock() < last.ends else None

    async def _day(self, *, fresh: bool) -> Ledger:
        """The budget day open now; ``fresh``: as stored now, else as last seen here
        while it lasts. A day that is over is replaced by the next (``next_day``)."""
        now = self.clock()
        if not fresh and (last := self._seen()) is not None:
            return last
        while True:
            found = await self._ledger.read()
            if found is not None and now < found.ends:
                self._last = found
                await self._check_raised(found)
                return found
            day, ends = next_day(now, self.zone(), found)
            used = 0 if found is not None else await self._counted(day)
            opened = await self._ledger.open(day, ends, used, found)
            if opened is not None:  # else another process opened it first: read it
                self._last = opened
                if found is not None:
                    await self._day_over(found.day)
                return opened

    async def _check_raised(self, ledger: Ledger) -> None:
        """Once a day per process: a "spent" notice of a day not spent under this
        process's cap (``DAILY_TOKEN_BUDGET`` raised and restarted) is resolved, and
        its claim dropped, so a cap met again is told again."""
        if ledger.day in self._checked or self.limit <= 0:
            return
        self._checked.add(ledger.day)
        if ledger.used >= self.limit:
            return
        key = notice_key(ledger.day, "spent")
        try:
            dropped = await self.db[c.USAGE].delete_one({"_id": key})
            if dropped.deleted_count and self.unnotify is not None:
                await self.unnotify(f"budget:{key}")
        except Exception:
            log.exception("could not resolve the budget's notice %s", key)

    async def _day_over(self, day: date) -> None:
        """A budget day closed: its 80% and 100% notices no longer hold, so an alert
        still open for them is resolved (the next day tells its own)."""
        if self.unnotify is None:
            return
        levels: tuple[Level, ...] = ("warned", "spent")
        for level in levels:
            key = notice_key(day, level)
            try:
                await self.unnotify(f"budget:{key}")
            except Exception:
                log.exception("could not resolve the budget's notice %s", key)

    async def _counted(self, day: date) -> int:
        """Tokens counted on ``day`` before the ledger was kept (the first day after an
        upgrade keeps what it used)."""
        return sum(x.total for x in await self.usage.since(day) if x.day == day)

    def _view(self, ledger: Ledger) -> BudgetView:
        resets = ledger.ends.astimezone(self.zone())
        return BudgetView(ledger.day, ledger.used, self.limit, resets)

    async def view(self, *, fresh: bool = True) -> BudgetView:
        """The day's budget (``fresh``: read now; else as last seen here)."""
        return self._view(await self._day(fresh=fresh))

    async def blocked(self, *, fresh: bool = True) -> BudgetView | None:
        """The day's budget when it is spent (no model call may be made now; the owner
        is told the first time a day), else None. ``fresh=False`` answers from what
        this process saw last (a hint; ``reserve`` is what holds the cap)."""
        if self.limit <= 0:
            return None
        view = await self.view(fresh=fresh)
        if not view.spent:
            return None
        await self._tell(view, "spent")
        return view

    def known_spent(self) -> bool:
        """Whether the day's budget was spent when this process last read or changed it
        (no database read: a hint for work to spare, such as fetching media for a call
        that will not be made; ``reserve`` is what holds the cap)."""
        last = self._seen()
        return self.limit > 0 and last is not None and last.used >= self.limit

    async def reserve(self, input_tokens: int) -> Hold | BudgetView:
        """Reserve a model call's bound (``input_tokens`` estimated, ``request_bound``,
        plus ``max_output``) before it is made; the day's budget instead when it is spent
        (no call may be made; the owner told once). While the cap is held by calls in
        flight, waits for them to settle (or their reservations to expire): one waiter
        at a time looks again, once per call settled here (or every ``WAIT_SECONDS``,
        for another process's), and the next looks as soon as it got through."""
        if self.limit <= 0:
            return Hold((self._seen() or await self._day(fresh=False)).day, 0)
        tokens = max(0, input_tokens) + self.max_output
        if not self._queue.locked():  # nobody waiting: try at once
            ledger = self._seen()
            if ledger is not None:  # the day known: one write takes the hold
                until_ = self.clock() + self.hold_for
                taken = await self._ledger.reserve(
                    ledger.day, self._proc, tokens, self.limit, until_
                )
                if taken is not None:
                    self._last = taken
                    return Hold(taken.day, tokens)
            outcome = await self._take(tokens, refused=ledger is not None)
            if outcome is not None:
                return outcome
        async with self._queue:
            while True:
                settled = self._settled  # a call settling while this one looks counts
                outcome = await self._take(tokens)
                if outcome is not None:
                    return outcome
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(settled.wait(), WAIT_SECONDS)

    async def _take(self, tokens: int, *, refused: bool = False) -> Hold | BudgetView | None:
        """One try: the hold; the budget when it is spent; None while calls in flight
        hold it. ``refused``: the caller's own write was just refused (``reserve``)."""
        while True:
            if not refused:
                ledger = self._seen() or await self._day(fresh=False)
                until_ = self.clock() + self.hold_for
                taken = await self._ledger.reserve(
                    ledger.day, self._proc, tokens, self.limit, until_
                )
                if taken is not None:
                    self._last = taken
                    return Hold(taken.day, tokens)
            refused = False
            ledger = await self._day(fresh=True)
            if ledger.used >= self.limit:
                view = self._view(ledger)
                await self._tell(view, "spent")
                return view
            if ledger.held < self.limit:
                continue  # a call settled (or the day changed) meanwhile: ask again
            if not await self._ledger.expire(ledger, self.clock()):
                return None

    async def settle(
        self,
        hold: Hold,
        kind: UsageKind,
        model: str,
        input_tokens: int,
        output_tokens: int,
        *,
        first: bool,
        cached_input_tokens: int = 0,
    ) -> None:
        """Count one model call in place of its reservation (``first``: the exchange's
        first, counted as an exchange); tell the owner when it crossed 80% or 100%.
        Never raises: the call is made."""
        tokens = input_tokens + output_tokens
        try:
            self.usage.add(
                hold.day, kind, input_tokens, output_tokens,
                model=model, exchanges=1 if first else 0,
                cached_input_tokens=cached_input_tokens,
            )  # fmt: skip
            ledger = await self._ledger.settle(hold.day, self._proc, hold.tokens, tokens)
            self._wake()
            if ledger is None:  # its day closed meanwhile: counted in that day's counts
                return
            self._last = ledger
            if self.limit <= 0 or not tokens:
                return
            view = self._view(ledger)
            if view.spent:
                await self._tell(view, "spent")
            elif view.share >= WARN_AT:
                await self._tell(view, "warned")
        except Exception:
            log.exception("could not count %d tokens of %s against the budget", tokens, model)

    async def release(self, hold: Hold) -> None:
        """Free the reservation of a call that failed (no answer, nothing counted).
        Never raises: an unreleased hold expires."""
        if not hold.tokens:
            return
        try:
            ledger = await self._ledger.settle(hold.day, self._proc, hold.tokens, 0)
            self._wake()
            if ledger is not None:
                self._last = ledger
        except Exception:
            log.exception("could not free a reservation of %d tokens", hold.tokens)

    async def record(
        self,
        kind: UsageKind,
        model: str,
        input_tokens: int,
        output_tokens: int,
        *,
        first: bool,
        cached_input_tokens: int = 0,
    ) -> None:
        """Count a model call made without a reservation (``settle`` without a hold)."""
        try:
            day = (await self._day(fresh=False)).day
        except Exception:
            log.exception("could not count %d tokens of %s", input_tokens + output_tokens, model)
            return
        await self.settle(
            Hold(day, 0), kind, model, input_tokens, output_tokens,
            first=first, cached_input_tokens=cached_input_tokens,
        )  # fmt: skip

    def _wake(self) -> None:
        """Wake the calls of this process waiting for the cap (a reservation ended)."""
        settled, self._settled = self._settled, asyncio.Event()
        settled.set()

    def spent_reply(
        self, view: BudgetView, *, tool_calls: Iterable[str] = (), effects: Iterable[str] = ()
    ) -> str:
        """What a chat gets instead of a model answer at 100% (``tool_calls``: what the
        turn called before the cap stopped it; ``effects``: what those calls changed, in
        words, so the owner knows what took effect)."""
        done = list(tool_calls)
        changed = list(effects)
        head = "My daily token budget is spent"
        if done:
            names = ", ".join(sorted(set(done)))
            head = (
                "I stopped before finishing: my daily token budget ran out during this task "
                f"({len(done)} tool call{'s' if len(done) != 1 else ''} done: {names})"
            )
        text = (
            f"{head} ({view.used:,} of {view.limit:,} tokens today), so I can't ask my "
            f"language model until it resets at {self._reset_words(view)}. Your message "
            f"is saved. To raise the budget, {RAISE_HINT}. Alert replies (ack, resolve, "
            "snooze) still work."
        )
        if changed:
            text += " What took effect before it stopped: " + "; ".join(changed) + "."
        if any(e.startswith(JOB_EFFECTS) for e in changed):
            text += " A job due before the reset is skipped unless the budget is raised."
        return text

    def skip_detail(self, view: BudgetView) -> str:
        """A skipped run's reason in words (its record's ``error``)."""
        return (
            f"daily token budget spent ({view.used:,} of {view.limit:,} tokens); "
            f"it resets at {self._reset_words(view)}"
        )

    def _reset_words(self, view: BudgetView) -> str:
        zone = self.zone()
        resets = view.resets_at.astimezone(zone)
        name = getattr(zone, "key", None) or resets.tzname()
        return f"{resets:%H:%M} {name} (in {until(resets, self.clock())})"

    async def _tell(self, view: BudgetView, level: Level) -> None:
        """Tell the owner once a day per level (claimed in ``usage`` first, so a restart
        or a second process does not tell again)."""
        if (view.day, level) in self._told:
            return
        self._told.add((view.day, level))
        key = notice_key(view.day, level)
        try:
            await self.db[c.USAGE].insert_one({"_id": key, "at": self.clock()})
        except DuplicateKeyError:
            return  # told before (this process before a restart, or another)
        percent = int(view.share * 100)
        if level == "warned":
            title = f"Token budget {percent}% used today"
            body = (
                f"{view.used:,} of {view.limit:,} tokens used today. At 100% chats get a "
                "short answer without the model and pulses and cron jobs are skipped "
                f"until {self._reset_words(view)}. To raise it, {RAISE_HINT}."
            )
        else:
            title = "Daily token budget spent"
            body = (
                f"{view.used:,} of {view.limit:,} tokens used today. Until it resets at "
                f"{self._reset_words(view)}, chats get a short answer without the model and "
                "pulses and cron jobs are skipped; monitors, alerts and alert replies keep "
                f"working. To raise it, {RAISE_HINT}."
            )
        try:
            await self.notify(title, body, f"budget:{key}")
        except Exception:
            log.exception("could not tell the owner: %s", title)
