"""The daily token budget, the spend cap that holds, and what tokens cost in USD.

Budget (``TokenBudget``; ``DAILY_TOKEN_BUDGET``): input plus output tokens per budget
day, one cap for every process on the database (``watchkeeper chat`` beside ``run``).
Guarantees:

1. Reserved before, settled after. Before each model call its bound is reserved
   (``reserve``): the request's input estimated from its size (``request_bound``, on the
   high side) plus the most it may write (``MAX_OUTPUT_TOKENS``, which every adapter
   asks for). The shared ledger (``storage.repos.token_budget``) holds, per process, a
   block of the day's headroom; a call is let through from its process's block while
   the block has room, without a database command. The block grows in one conditional
   update for every call waiting then, by what they need and at least by what its calls
   in flight hold (a burst doubles it a few times), and only while everything held
   stays within the cap. Past that the rule is one call at a time: it is let through
   while what is held (less this process's free headroom) is below the cap, so however
   many chats, runs and processes call at once, the day ends at most one reservation
   past the cap. A call that finds the cap held by calls in flight (not spent) waits
   for them to settle: woken by a settle here (its hold is back in the block: no read),
   and looking at the ledger every ``WAIT_SECONDS`` for another process's. After the
   call its real usage replaces the reservation (``settle``): in the block at once, in
   the ledger with every call settled within ``SETTLE_SECONDS`` (one command; the free
   headroom goes back with it once no call here holds or wants any, and when the app
   stops); a failed call frees it (``release``). A process killed in between holds its
   block at most ``hold_for`` (30 min, or longer for a long ``LLM_TIMEOUT_SECONDS``)
   after it last grew it, so after its last reservation: a block lets calls through
   only for ``renew_every`` (a tenth of ``hold_for``) after it grew, then one command
   renews it. What the killed process had settled in its last ``SETTLE_SECONDS`` is
   not counted in the ledger (as the usage counts' last seconds are not).
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

On the hot path a model call costs no database command while its process's block has
room; a burst of 100 chats costs about 15 (the block's growth, the looks while the cap
is held, a few flushes), where a reservation and a settlement of their own for each
call, and re-reads by the calls refused, cost 264 (``bench/profile_burst.py``). Why a
block, as a database hands out sequence numbers in ranges: the one conditional update
stays what holds the cap, and a block that shrinks to the one-call rule at the cap keeps
its bound; reserving less than a call may write (a lower ``MAX_OUTPUT_TOKENS``) would
not. Nor would waking waiters only by polling the ledger: each look is a command, and
the settles that free the cap are mostly this process's own. The counts for the Spend
page are written in batches too (``storage.repos.usage``).

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
from agent.spend.block import Block
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


SETTLE_SECONDS = 0.5
"""How long what settled calls used waits to be counted in the ledger, so the calls
settled meanwhile are counted together, in one command (group commit). Another process
sees them this much later; this process sees them at once."""
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
    no cap) from ``block`` (None: counted alone)."""

    day: date
    tokens: int
    block: Block | None = field(default=None, compare=False, repr=False)


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
    settle_seconds: float = SETTLE_SECONDS
    """How long settled calls wait to be counted in the ledger together."""
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
    _block: Block | None = field(default=None, init=False)
    """This process's headroom on the day (``agent.spend.block``)."""
    _want: int = field(default=0, init=False)
    """Tokens the calls waiting here need."""
    _looked: float = field(default=-math.inf, init=False)
    """When a call waiting here last read the ledger (loop time)."""
    _writing: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    """One command changing this process's hold at a time (a lease, a flush)."""
    _timer: asyncio.TimerHandle | None = field(default=None, init=False)
    _flushing: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._ledger = TokenLedger(self.db)

    @property
    def renew_every(self) -> timedelta:
        """How long after a lease its block may hand out holds: a call let through then
        is still covered for ``hold_for`` less this (9 of its ``TRIES_PER_CALL``)."""
        return self.hold_for / TRIES_PER_CALL

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

    def _pending(self, day: date) -> int:
        """What this process's settled calls used on ``day`` that the ledger does not
        count yet."""
        block = self._block
        return block.pending if block is not None and block.day == day else 0

    def _view(self, ledger: Ledger) -> BudgetView:
        resets = ledger.ends.astimezone(self.zone())
        used = ledger.used + self._pending(ledger.day)
        return BudgetView(ledger.day, used, self.limit, resets)

    async def view(self, *, fresh: bool = True) -> BudgetView:
        """The day's budget (``fresh``: this process's settled calls counted and the
        ledger read now; else as last seen here)."""
        if fresh:
            await self.flush()
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
        return (
            self.limit > 0
            and last is not None
            and last.used + self._pending(last.day) >= self.limit
        )

    async def reserve(self, input_tokens: int) -> Hold | BudgetView:
        """Reserve a model call's bound (``input_tokens`` estimated, ``request_bound``,
        plus ``max_output``) before it is made; the day's budget instead when it is spent
        (no call may be made; the owner told once). From this process's block when it
        has room (no database command); else the block grows, in one command for every
        call waiting. While the cap is held by calls in flight, waits for them to settle
        (or their reservations to expire): one waiter at a time looks again, once per
        call settled here (from the block), and at the ledger every ``WAIT_SECONDS``
        (another process's settle), and the next looks as soon as it got through."""
        ledger, block = self._seen(), self._block
        if self.limit <= 0:  # nothing held; what it used is counted with the next flush
            day = (ledger or await self._day(fresh=False)).day
            return Hold(day, 0, self._block_on(day))
        tokens = max(0, input_tokens) + self.max_output
        if (
            ledger is not None
            and block is not None
            and block.day == ledger.day
            and not self._queue.locked()  # nobody waiting: take from the block at once
            and ledger.used + block.pending < self.limit
            and block.fits(tokens, self.clock())
        ):
            block.grant(tokens)
            return Hold(block.day, tokens, block)
        self._want += tokens
        try:
            async with self._queue:
                while True:
                    settled = self._settled  # a call settling while this one looks counts
                    ledger = self._seen() or await self._day(fresh=False)
                    block = self._block_on(ledger.day)
                    if ledger.used + block.pending >= self.limit:
                        view = self._view(ledger)
                        await self._tell(view, "spent")
                        return view
                    now = self.clock()
                    if block.fits(tokens, now):
                        block.grant(tokens)
                        return Hold(block.day, tokens, block)
                    if self._may_grow(ledger, block):
                        # The block grows by what every waiting call needs, and at least
                        # by what its calls in flight hold: a burst doubles it a few times.
                        more = max(0, max(self._want, block.out) - block.free)
                        async with self._writing:
                            taken = await self._ledger.reserve(
                                block.day, self._proc, more, self.limit - block.loose,
                                now + self.hold_for, holds=block.held,
                            )  # fmt: skip
                            if taken is not None:
                                self._last = taken
                                block.leased(more, now + self.renew_every)
                                continue
                        self._looked = -math.inf  # refused: as the ledger is now, at once
                    clock = asyncio.get_running_loop().time()
                    if clock - self._looked >= WAIT_SECONDS:  # for every waiter here
                        self._looked = clock
                        outcome = await self._refused(tokens)
                        if isinstance(outcome, BudgetView):
                            await self._tell(outcome, "spent")
                        if outcome is not None:
                            return outcome
                        continue  # grown, or as the ledger is now: may it grow from here?
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(settled.wait(), WAIT_SECONDS)
        finally:
            self._want -= tokens

    def _may_grow(self, ledger: Ledger, block: Block) -> bool:
        """Whether the ledger as last seen had room for the block to grow (a call here
        settled meanwhile, or the block's time to grant ran out)."""
        more = max(0, max(self._want, block.out) - block.free)
        return ledger.held + more + block.loose <= self.limit

    def _block_on(self, day: date) -> Block:
        """This process's block on ``day`` (a new, empty one on a new day)."""
        block = self._block
        if block is None or block.day != day or block.dead:
            block = self._block = Block(day)
        return block

    async def _refused(self, tokens: int) -> Hold | BudgetView | None:
        """The block could not grow by all that is waiting: as the ledger is now, the
        budget when it is spent, else a hold for this call (the rest of the cap, or this
        call as the day's last), else None while calls in flight hold the cap."""
        async with self._writing:
            while True:
                ledger = await self._day(fresh=True)
                block = self._block_on(ledger.day)
                mine = sum(h.tokens for h in ledger.procs if h.proc == self._proc)
                if mine < block.held:  # its hold expired (this process was taken for dead)
                    block = self._block = block.orphan()
                if ledger.used + block.pending >= self.limit:
                    return self._view(ledger)  # told by the caller, not holding the lock
                now = self.clock()
                room = self.limit - ledger.held + block.free - block.loose
                if room >= tokens:  # what fits of what is waiting: the block stays under
                    more = max(0, min(max(self._want, block.out, tokens), room) - block.free)
                elif room > 0:  # the day's last call: it alone may go past the cap
                    more = max(0, tokens - block.free)
                elif await self._ledger.expire(ledger, now):
                    continue
                else:  # the block's free part, too small here, may do for another's
                    self._flush_soon()
                    return None
                taken = await self._ledger.reserve(
                    block.day, self._proc, more, self.limit - block.loose,
                    now + self.hold_for, whole=room >= tokens, free=block.free,
                    holds=block.held,
                )  # fmt: skip
                if taken is None:  # changed meanwhile: look again
                    continue
                self._last = taken
                block.leased(more, now + self.renew_every)
                block.grant(tokens)
                return Hold(block.day, tokens, block)

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
        Its block frees the hold at once and counts what the call used in the ledger
        with the others settled within ``settle_seconds`` (one command). Never raises:
        the call is made."""
        tokens = input_tokens + output_tokens
        try:
            self.usage.add(
                hold.day, kind, input_tokens, output_tokens,
                model=model, exchanges=1 if first else 0,
                cached_input_tokens=cached_input_tokens,
            )  # fmt: skip
            block, current = hold.block, self._block
            if block is not None and current is not None and current.day == hold.day:
                block.settle(hold.tokens, tokens)
                if block is not current:  # its hold expired: counted without one
                    current.loose += tokens
                self._wake()
                self._flush_soon()
                ledger = self._seen()
                if ledger is None or ledger.day != hold.day:
                    return
            else:  # no hold, or its day closed: counted in that day's counts only
                found = await self._ledger.count(hold.day, tokens)
                self._wake()
                if found is None:
                    return
                ledger = self._last = found
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
        """Free the reservation of a call that failed (no answer, nothing counted):
        back in its block, given back to the ledger with the next flush. Never raises."""
        if hold.block is not None and hold.tokens:
            hold.block.settle(hold.tokens, 0)
            self._wake()
            self._flush_soon()

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

    def _flush_soon(self) -> None:
        """Flush within ``settle_seconds`` (armed once for all that settle meanwhile)."""
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.settle_seconds, self._flush_due)

    def _flush_due(self) -> None:
        self._timer = None
        self._flushing = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        try:
            await self.flush()
        except Exception:  # kept pending: the next flush or lease tries again
            log.exception("could not count the budget's settled calls")

    async def flush(self, *, everything: bool = False) -> None:
        """Count in the ledger what this process's settled calls used, and give back
        its block's free headroom when no call here holds or wants any, or when the cap
        is held all through (a call waiting here, or in another process, may be let
        through as the day's last only once what is free is back), or the app stops
        (``everything``); in one command."""
        async with self._writing:
            block, ledger = self._block, self._last
            if block is None or block.dead:
                return
            idle = everything or (block.out == 0 and self._want == 0)
            tight = ledger is not None and ledger.held + block.loose >= self.limit > 0
            free = block.free if idle or tight else 0
            spent, loose = block.spent, block.loose
            if not (spent or loose or free):
                return
            block.returning = free
            try:
                found = await self._ledger.settle(block.day, self._proc, spent, loose, free)
                if found is None and (spent or free):  # its hold expired: counted without
                    found = await self._ledger.count(block.day, spent + loose)
                    if found is not None:
                        block.flushed(spent, loose, 0)
                        self._block = block.orphan()
                        self._last = found
                        return
            finally:
                block.returning = 0
            if found is None:  # the day closed: counted in that day's counts only
                block.dead = True
                return
            block.flushed(spent, loose, free)
            self._last = found

    async def close(self) -> None:
        """Write what is pending and give the block back (the app stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None and not self._flushing.done():
            await asyncio.wait([self._flushing])
        try:
            await self.flush(everything=True)
        except Exception:
            log.exception("could not give the budget's block back (it expires)")

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
