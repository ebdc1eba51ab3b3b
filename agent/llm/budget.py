"""The daily token budget, the spend cap that holds, and what tokens cost in USD.

Budget (``TokenBudget``, the spend cap that holds; ``DAILY_TOKEN_BUDGET``): input plus
output tokens per local day of the owner
(their timezone, ``agent.owner``), checked before every model call (``blocked``) and
counted after each (``record``). Guarantees:

1. The count includes what is not written yet: counts are flushed in batches, so the
   budget keeps its own running total per day in
   memory, read once per day from the database (flushed first) and then added to by
   every call it records. A restart reads it again: a cap reached stays reached.
2. At 80% the owner gets one info notice a day; at 100% one more, whether a chat, a
   pulse or a cron run met the cap. "Once" survives a restart: each notice is claimed
   by inserting ``<day>:budget:<level>`` into ``usage`` (a duplicate key: told before).
3. At 100% no model call is made (0 = no cap): a chat gets ``spent_reply`` (when it
   resets, how to raise it), a run is skipped. A call already made is counted, so a turn
   that crosses the cap finishes its round (the tools the model asked for) and stops
   before the next call.

Only this process's calls are counted live; another process on the same database
(``watchkeeper chat`` beside ``watchkeeper run``) is seen at the next day's read.

Prices (``PriceTable``): USD per million input, output and cached input tokens per
model, list prices by default (``DEFAULT_PRICES``), overridden by the ``settings``
document ``_id: "model_prices"``: ``{"models": [{"model", "input", "output", "cached"?}],
"default": {"input", "output", "cached"?}}``, read each time a page shows money. A
model missing from the table costs ``default`` and is marked estimated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, tzinfo
from types import MappingProxyType
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.repos.usage import DayUsage, UsageKind, UsageLog

Doc = dict[str, Any]
log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Level = Literal["warned", "spent"]
WARN_AT = 0.8
PRICES_ID = "model_prices"
"""The ``settings`` document holding the owner's price overrides."""
MAX_PRICE = 10_000.0
"""USD per million tokens, at most: a larger number is a typo (cents for dollars)."""
MAX_MODEL_CHARS = 200
"""A model's name, at most (real ones are well under 100 characters)."""
MAX_PRICE_CHARS = 32
"""A price as typed in a form, at most."""
MAX_PRICED_MODELS = 200
"""Models with a price of the owner's, at most: the ``settings`` document stays small."""
RAISE_HINT = "set DAILY_TOKEN_BUDGET in .env (0 = no cap) and restart Watchkeeper"


@dataclass(frozen=True)
class Price:
    """USD per million tokens: input, output, and input read from the provider's prompt
    cache (``cached``; None: no discount known, priced as input)."""

    input: float
    output: float
    cached: float | None = None

    @property
    def cached_input(self) -> float:
        """What a cached input token costs (never more than an uncached one)."""
        return self.input if self.cached is None else min(self.cached, self.input)


# List prices as of 2026 (USD per million tokens, standard tier: input, output, cached
# input); override them, or add models, in the ``settings`` document ``model_prices``.
# The requests repeat their start from the second of a conversation on, so most input
# tokens of a chat are cached ones: priced as input, a month's spend read 2-3 times high.
DEFAULT_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-4.1": Price(2.00, 8.00, 0.50),
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
        "gpt-4o": Price(2.50, 10.00, 1.25),
        "gpt-4o-mini": Price(0.15, 0.60, 0.075),
        "gpt-5": Price(1.25, 10.00, 0.125),
        "gpt-5-mini": Price(0.25, 2.00, 0.025),
        "gpt-5-nano": Price(0.05, 0.40, 0.005),
        "gpt-5.1": Price(1.25, 10.00, 0.125),
        "o3": Price(2.00, 8.00, 0.50),
        "o4-mini": Price(1.10, 4.40, 0.275),
        "gemini-2.5-pro": Price(1.25, 10.00, 0.31),
        "gemini-2.5-flash": Price(0.30, 2.50, 0.075),
        "gemini-2.5-flash-lite": Price(0.10, 0.40, 0.025),
        "gemini-2.0-flash": Price(0.10, 0.40, 0.025),
    }
)
DEFAULT_PRICE = Price(2.00, 8.00)
"""What a model missing from the table is priced at (marked estimated)."""
_VERSION_TAIL = re.compile(r"-(?:\d+|latest)$")
"""A dated or numbered snapshot of a listed model (``gpt-4o-2024-08-06``,
``gemini-2.0-flash-001``): same price as the model."""


class PriceError(ValueError):
    """A price that cannot be used; the message names the bad value."""


def check_price(model: str, value: object) -> Price:
    """``{"input": x, "output": y}``, optionally ``"cached": z`` (USD per million
    tokens), as a ``Price``."""
    if not isinstance(value, Mapping):
        raise PriceError(f"price of {model!r} must be {{'input': USD, 'output': USD}}")
    sides: list[float | None] = []
    for side in ("input", "output", "cached"):
        raw = value.get(side)
        if side == "cached" and raw is None:
            sides.append(None)
            continue
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise PriceError(f"{side} price of {model!r} must be a number, not {raw!r}")
        if not 0 <= raw <= MAX_PRICE:
            raise PriceError(
                f"{side} price of {model!r} is {raw}: give USD per million tokens, "
                f"0 to {MAX_PRICE:g}"
            )
        sides.append(float(raw))
    given, out, cached = sides
    assert given is not None and out is not None
    return Price(given, out, cached)


def model_name(raw: object) -> str:
    """``raw`` as a price override's model name is stored (stripped, lower case);
    ``PriceError`` when it is empty, longer than ``MAX_MODEL_CHARS`` or holds a control
    character (the message says which, without echoing a long name back)."""
    if not isinstance(raw, str):
        raise PriceError(f"model name {raw!r} is not text")
    name = raw.strip().lower()
    if not name:
        raise PriceError("model name '' is empty")
    if len(name) > MAX_MODEL_CHARS:
        raise PriceError(
            f"a model name is at most {MAX_MODEL_CHARS} characters; this one has {len(name):,}"
        )
    if not name.isprintable():
        raise PriceError(f"model name {name!r} holds a control character")
    return name


def price_doc(price: Price) -> Doc:
    """As stored in ``model_prices`` (``cached`` only when known)."""
    doc: Doc = {"input": price.input, "output": price.output}
    if price.cached is not None:
        doc["cached"] = price.cached
    return doc


@dataclass(frozen=True)
class Cost:
    usd: float
    estimated: bool = False
    """Some of it was priced at the default: its model is missing from the table."""

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.usd + other.usd, self.estimated or other.estimated)


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, Price] = field(default_factory=lambda: DEFAULT_PRICES)
    default: Price = DEFAULT_PRICE

    def price_of(self, model: str) -> tuple[Price, bool]:
        """The model's price and whether it is estimated (missing from the table).
        ``models/gemini-2.5-pro`` is ``gemini-2.5-pro``; a dated snapshot costs what
        its model does."""
        name = model.strip().lower().removeprefix("models/")
        if name in self.prices:
            return self.prices[name], False
        base = _VERSION_TAIL.sub("", name)
        while base != name:  # gpt-4o-2024-08-06 -> gpt-4o-2024-08 -> ... -> gpt-4o
            if base in self.prices:
                return self.prices[base], False
            name, base = base, _VERSION_TAIL.sub("", base)
        return self.default, True

    def cost(
        self, model: str, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0
    ) -> Cost:
        """USD for the tokens; ``cached_input_tokens`` (of the input) at the cached rate."""
        price, estimated = self.price_of(model)
        cached = max(0, min(cached_input_tokens, input_tokens))
        usd = (
            (input_tokens - cached) * price.input
            + cached * price.cached_input
            + output_tokens * price.output
        ) / 1_000_000
        return Cost(usd, estimated)

    def total(self, counts: Iterable[DayUsage]) -> Cost:
        spent = Cost(0.0)
        for count in counts:
            spent = spent + self.cost(count.model, count.input, count.output, count.cached_input)
        return spent


def usd(amount: float) -> str:
    """``$0.0012`` below a dollar (small sums stay visible), ``$12.34`` above."""
    if amount <= 0:
        return "$0.00"
    if amount < 0.0001:
        return "<$0.0001"
    if amount < 1:
        return f"${amount:.4f}"
    return f"${amount:,.2f}"


def shown(cost: Cost) -> str:
    """``$0.0012``, with ``~`` in front when estimated."""
    return ("~" if cost.estimated else "") + usd(cost.usd)


async def load_prices(db: AsyncDatabase[Doc]) -> PriceTable:
    """The default table with the owner's overrides; a bad stored entry is logged and
    skipped (the rest still applies)."""
    doc = await db[c.SETTINGS].find_one({"_id": PRICES_ID})
    if not doc:
        return PriceTable()
    prices = dict(DEFAULT_PRICES)
    default = DEFAULT_PRICE
    for entry in doc.get("models") or []:
        name = entry.get("model") if isinstance(entry, Mapping) else None
        try:
            if not isinstance(name, str) or not name.strip():
                raise PriceError(f"entry {entry!r} has no model name")
            key = model_name(name)  # one stored before names were bounded: skipped
            prices[key] = check_price(key, entry)
        except PriceError as exc:
            log.warning("stored model price ignored: %s", exc)
    if doc.get("default") is not None:
        try:
            default = check_price("default", doc["default"])
        except PriceError as exc:
            log.warning("stored default model price ignored: %s", exc)
    return PriceTable(MappingProxyType(prices), default)


async def save_prices(
    db: AsyncDatabase[Doc],
    models: Mapping[str, Mapping[str, object]],
    default: Mapping[str, object] | None = None,
) -> PriceTable:
    """Store the owner's overrides (every value checked first; nothing is stored when
    one is bad); returns the table as it reads now."""
    if len(models) > MAX_PRICED_MODELS:
        raise PriceError(f"at most {MAX_PRICED_MODELS} models can have a price of their own")
    entries = []
    for raw, value in models.items():
        name = model_name(raw)
        price = check_price(name, value)
        entries.append({"model": name, **price_doc(price)})
    fields: Doc = {"models": entries}
    if default is not None:
        price = check_price("default", default)
        fields["default"] = price_doc(price)
    await db[c.SETTINGS].update_one({"_id": PRICES_ID}, {"$set": fields}, upsert=True)
    return await load_prices(db)


async def set_price(
    db: AsyncDatabase[Doc], model: str, input_usd: str, output_usd: str, cached_usd: str = ""
) -> Price:
    """Store one override as typed in a form (``default``: the price of models missing
    from the table); checked first, nothing is stored when it is bad. A blank cached
    price keeps the one the table has for the model (none: priced as input). A model
    new to the table is refused once ``MAX_PRICED_MODELS`` have a price."""
    if not model.strip():
        raise PriceError("name the model (or 'default' for models missing from the table)")
    name = model_name(model)
    values: dict[str, object] = {}
    for side, raw in (("input", input_usd), ("output", output_usd), ("cached", cached_usd)):
        if len(raw) > MAX_PRICE_CHARS:
            raise PriceError(f"{side} price is at most {MAX_PRICE_CHARS} characters")
        if side == "cached" and not raw.strip():
            if name != "default":
                known, estimated = (await load_prices(db)).price_of(name)
                values[side] = None if estimated else known.cached
            continue
        try:
            values[side] = float(raw.strip().removeprefix("$").replace(",", ""))
        except ValueError:
            raise PriceError(f"{side} price of {name!r} must be a number, not {raw!r}") from None
    price = check_price(name, values)
    value = price_doc(price)
    settings = db[c.SETTINGS]
    if name == "default":
        await settings.update_one({"_id": PRICES_ID}, {"$set": {"default": value}}, upsert=True)
        return price
    with contextlib.suppress(DuplicateKeyError):  # made at once by another request
        await settings.update_one({"_id": PRICES_ID}, {"$setOnInsert": {"models": []}}, upsert=True)
    await settings.update_one({"_id": PRICES_ID}, {"$pull": {"models": {"model": name}}})
    # Pushed only while there is room (a full list has an entry at its last index).
    room = {"_id": PRICES_ID, f"models.{MAX_PRICED_MODELS - 1}": {"$exists": False}}
    pushed = await settings.update_one(room, {"$push": {"models": {"model": name, **value}}})
    if pushed.matched_count == 0:
        raise PriceError(f"at most {MAX_PRICED_MODELS} models can have a price of their own")
    return price


# --- the daily budget -----------------------------------------------------------------

Notify = Callable[[str, str, str], Awaitable[None]]
"""Tells the owner (title, body, key): an info alert, or a chat message without alerts."""
Zone = Callable[[], tzinfo]


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


def next_midnight(day: date, tz: tzinfo) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(0), tz)


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
    db: AsyncDatabase[Doc]
    limit: int
    """Tokens a day; 0: no cap."""
    clock: Clock
    zone: Zone
    """The owner's timezone now (``OwnerSettings.tz``)."""
    notify: Notify
    _used: dict[date, int] = field(default_factory=dict)
    _told: set[tuple[date, Level]] = field(default_factory=set)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def today(self) -> date:
        return self.clock().astimezone(self.zone()).date()

    async def used(self, day: date) -> int:
        """Tokens spent on ``day``: read once (unwritten counts flushed first), then kept."""
        if day not in self._used:
            async with self._lock:
                if day not in self._used:
                    counts = await self.usage.since(day)
                    self._used = {d: n for d, n in self._used.items() if d >= day - timedelta(1)}
                    self._used[day] = sum(x.total for x in counts if x.day == day)
        return self._used[day]

    async def view(self) -> BudgetView:
        day = self.today()
        used = await self.used(day)
        return BudgetView(day, used, self.limit, next_midnight(day, self.zone()))

    async def blocked(self) -> BudgetView | None:
        """The day's budget when it is spent (no model call may be made now; the owner
        is told the first time a day), else None."""
        if self.limit <= 0:
            return None
        view = await self.view()
        if not view.spent:
            return None
        await self._tell(view, "spent")
        return view

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
        """Count one model call (``first``: the exchange's first, counted as an exchange);
        tell the owner when it crossed 80% or 100%. Never raises: the call is made."""
        tokens = input_tokens + output_tokens
        try:
            day = self.today()
            await self.used(day)  # loaded first: the database does not hold this call yet
            self._used[day] += tokens
            await self.usage.add(
                day, kind, input_tokens, output_tokens,
                model=model, exchanges=1 if first else 0,
                cached_input_tokens=cached_input_tokens,
            )  # fmt: skip
            if self.limit <= 0 or not tokens:
                return
            view = BudgetView(day, self._used[day], self.limit, next_midnight(day, self.zone()))
            if view.spent:
                await self._tell(view, "spent")
            elif view.share >= WARN_AT:
                await self._tell(view, "warned")
        except Exception:
            log.exception("could not count %d tokens of %s against the budget", tokens, model)

    def spent_reply(self, view: BudgetView, *, tool_calls: Iterable[str] = ()) -> str:
        """What a chat gets instead of a model answer at 100% (``tool_calls``: what the
        turn did before the cap stopped it)."""
        done = list(tool_calls)
        head = "My daily token budget is spent"
        if done:
            names = ", ".join(sorted(set(done)))
            head = (
                "I stopped before finishing: my daily token budget ran out during this task "
                f"({len(done)} tool call{'s' if len(done) != 1 else ''} done: {names})"
            )
        return (
            f"{head} ({view.used:,} of {view.limit:,} tokens today), so I can't ask my "
            f"language model until it resets at {self._reset_words(view)}. Your message "
            f"is saved. To raise the budget, {RAISE_HINT}. Alert replies (ack, resolve, "
            "snooze) still work."
        )

    def skip_detail(self, view: BudgetView) -> str:
        """A skipped run's reason in words (its record's ``error``)."""
        return (
            f"daily token budget spent ({view.used:,} of {view.limit:,} tokens); "
            f"it resets at {self._reset_words(view)}"
        )

    def _reset_words(self, view: BudgetView) -> str:
        zone = self.zone()
        name = getattr(zone, "key", None) or view.resets_at.tzname()
        return f"{view.resets_at:%H:%M} {name} (in {until(view.resets_at, self.clock())})"

    async def _tell(self, view: BudgetView, level: Level) -> None:
        """Tell the owner once a day per level (claimed in ``usage`` first, so a restart
        or a second process does not tell again)."""
        if (view.day, level) in self._told:
            return
        self._told.add((view.day, level))
        key = f"{view.day.isoformat()}:budget:{level}"
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
