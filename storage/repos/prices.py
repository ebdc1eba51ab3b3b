"""The owner's model prices as stored: the ``settings`` document ``_id: "model_prices"``,
``{"models": [{"model", "input", "output", "cached"?}], "default": {"input", "output",
"cached"?}}`` (USD per million tokens), read into ``Price``s here (``read_prices``) and
written from them. What a price means, and the list prices they override:
``agent.spend.prices``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from storage import collections as c
from storage.records import Doc

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

    def to_doc(self) -> Doc:
        """As stored in ``model_prices`` (``cached`` only when known)."""
        doc: Doc = {"input": self.input, "output": self.output}
        if self.cached is not None:
            doc["cached"] = self.cached
        return doc


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


@dataclass(frozen=True)
class StoredPrices:
    """The owner's overrides as stored: a price per model, and the default's if set."""

    models: Mapping[str, Price]
    default: Price | None = None


async def read_prices(db: AsyncDatabase[Doc]) -> StoredPrices | None:
    """The owner's overrides (None: none stored); a bad stored entry is logged and
    skipped (the rest still applies)."""
    doc = await db[c.SETTINGS].find_one({"_id": PRICES_ID})
    if not doc:
        return None
    models: dict[str, Price] = {}
    default: Price | None = None
    for entry in doc.get("models") or []:
        name = entry.get("model") if isinstance(entry, Mapping) else None
        try:
            if not isinstance(name, str) or not name.strip():
                raise PriceError(f"entry {entry!r} has no model name")
            key = model_name(name)  # one stored before names were bounded: skipped
            models[key] = check_price(key, entry)
        except PriceError as exc:
            log.warning("stored model price ignored: %s", exc)
    if doc.get("default") is not None:
        try:
            default = check_price("default", doc["default"])
        except PriceError as exc:
            log.warning("stored default model price ignored: %s", exc)
    return StoredPrices(MappingProxyType(models), default)


async def write_prices(
    db: AsyncDatabase[Doc], models: Mapping[str, Price], default: Price | None = None
) -> None:
    """Store the owner's overrides (in place of the models stored; the default only when
    given)."""
    if len(models) > MAX_PRICED_MODELS:
        raise PriceError(f"at most {MAX_PRICED_MODELS} models can have a price of their own")
    fields: Doc = {"models": [{"model": name, **p.to_doc()} for name, p in models.items()]}
    if default is not None:
        fields["default"] = default.to_doc()
    await db[c.SETTINGS].update_one({"_id": PRICES_ID}, {"$set": fields}, upsert=True)


async def put_price(db: AsyncDatabase[Doc], name: str, price: Price) -> None:
    """Store one override (``default``: the price of models missing from the table); a
    model new to the overrides is refused once ``MAX_PRICED_MODELS`` have a price."""
    value = price.to_doc()
    settings = db[c.SETTINGS]
    if name == "default":
        await settings.update_one({"_id": PRICES_ID}, {"$set": {"default": value}}, upsert=True)
        return
    with contextlib.suppress(DuplicateKeyError):  # made at once by another request
        await settings.update_one({"_id": PRICES_ID}, {"$setOnInsert": {"models": []}}, upsert=True)
    await settings.update_one({"_id": PRICES_ID}, {"$pull": {"models": {"model": name}}})
    # Pushed only while there is room (a full list has an entry at its last index).
    room = {"_id": PRICES_ID, f"models.{MAX_PRICED_MODELS - 1}": {"$exists": False}}
    pushed = await settings.update_one(room, {"$push": {"models": {"model": name, **value}}})
    if pushed.matched_count == 0:
        raise PriceError(f"at most {MAX_PRICED_MODELS} models can have a price of their own")
