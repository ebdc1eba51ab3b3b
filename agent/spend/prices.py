"""What tokens cost in USD.

Prices (``PriceTable``): USD per million input, output and cached input tokens per
model, list prices by default (``DEFAULT_PRICES``), overridden by the ``settings``
document ``_id: "model_prices"``: ``{"models": [{"model", "input", "output", "cached"?}],
"default": {"input", "output", "cached"?}}``, read each time a page shows money. A
model missing from the table costs ``default`` and is marked estimated.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.repos.usage import DayUsage

Doc = dict[str, Any]
log = logging.getLogger(__name__)

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
