"""What tokens cost in USD.

Prices (``PriceTable``): USD per million input, output and cached input tokens per
model, list prices by default (``DEFAULT_PRICES``), overridden by the owner's prices
(the ``settings`` document ``_id: "model_prices"``, read and written as ``Price``s by
``storage.repos.prices``), read each time a page shows money. A model missing from the
table costs ``default`` and is marked estimated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage.repos.prices import (
    MAX_PRICE_CHARS,
    MAX_PRICED_MODELS,
    Price,
    PriceError,
    check_price,
    model_name,
    put_price,
    read_prices,
    write_prices,
)
from storage.repos.usage import DayUsage

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


async def load_prices(db: AsyncDatabase[dict[str, Any]]) -> PriceTable:
    """The default table with the owner's overrides (``storage.repos.prices``)."""
    stored = await read_prices(db)
    if stored is None:
        return PriceTable()
    prices = {**DEFAULT_PRICES, **stored.models}
    return PriceTable(MappingProxyType(prices), stored.default or DEFAULT_PRICE)


async def save_prices(
    db: AsyncDatabase[dict[str, Any]],
    models: Mapping[str, Mapping[str, object]],
    default: Mapping[str, object] | None = None,
) -> PriceTable:
    """Store the owner's overrides (every value checked first; nothing is stored when
    one is bad); returns the table as it reads now."""
    if len(models) > MAX_PRICED_MODELS:
        raise PriceError(f"at most {MAX_PRICED_MODELS} models can have a price of their own")
    checked = {}
    for raw, value in models.items():
        name = model_name(raw)
        checked[name] = check_price(name, value)
    fallback = check_price("default", default) if default is not None else None
    await write_prices(db, checked, fallback)
    return await load_prices(db)


async def set_price(
    db: AsyncDatabase[dict[str, Any]],
    model: str,
    input_usd: str,
    output_usd: str,
    cached_usd: str = "",
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
    await put_price(db, name, price)
    return price
