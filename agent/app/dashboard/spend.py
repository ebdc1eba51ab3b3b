"""Spend: ``GET /spend``, input and output tokens per day for 30 days, by chat, cron and
pulse, as two stacked bar charts (inline SVG) with totals and a table of every day, and
what they cost in USD by model (``agent.spend.budget``: list prices, the owner's overrides;
a model missing from the table is priced by the default and marked estimated, ``~``).

Read from ``usage`` (``agent.spend.budget``): at most 90 small documents for the month.
``spend_table`` turns the counts into one row per day (days with no tokens included,
as zeros) and totals; the table of days folds each stretch without spend into one line
(``folded``); ``spend_svg`` draws one stacked bar per day as inline SVG
(``viewBox``, ``width="100%"``), a segment per kind with a ``<title>`` in words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from types import MappingProxyType
from typing import Literal

from aiohttp import web
from markupsafe import Markup, escape

from agent.app.dashboard.context import Dashboard
from agent.spend.prices import DEFAULT_PRICE, Cost, PriceTable, load_prices, set_price, shown
from storage.repos.prices import MAX_MODEL_CHARS, MAX_PRICE_CHARS, Price, PriceError, model_name
from storage.repos.usage import KINDS, DayUsage, UsageKind

DAYS = 30
Side = Literal["input", "output"]
KIND_COLOURS: Mapping[str, str] = MappingProxyType(
    {"chat": "#1976d2", "cron": "#8e24aa", "pulse": "#00897b"}
)
LEFT = 64
WIDTH = 720
PLOT_H = 160
TOP = 10
SLOT = (WIDTH - LEFT - 8) / DAYS
BAR_W = SLOT * 0.7


@dataclass
class DayRow:
    day: date
    input: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    output: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def side(self, side: Side) -> dict[str, int]:
        return self.input if side == "input" else self.output

    @property
    def total(self) -> int:
        return sum(self.input.values()) + sum(self.output.values())


@dataclass
class ModelRow:
    model: str
    """``""`` for counts kept before models were recorded (shown as unknown)."""
    input: int = 0
    output: int = 0
    cached_input: int = 0
    """Of ``input``, what the provider read from its prompt cache."""
    cost: Cost = field(default_factory=lambda: Cost(0.0))
    price: Price = DEFAULT_PRICE
    """USD per million tokens, as the table prices this model."""

    @property
    def label(self) -> str:
        return self.model or "(unknown)"


@dataclass
class Spend:
    rows: list[DayRow]
    """Oldest day first, ``DAYS`` of them, ending today."""
    totals: dict[str, dict[str, int]]
    """kind (and ``all``) -> {"input", "output", "total"}."""
    costs: dict[str, Cost] = field(default_factory=dict)
    """kind (and ``all``) -> USD over the days shown."""
    day_costs: dict[date, Cost] = field(default_factory=dict)
    models: list[ModelRow] = field(default_factory=list)
    """Each model's tokens and cost over the days shown, dearest first."""

    def cost(self, key: str | date) -> str:
        """USD as shown (``$0.0012``; ``~`` in front when estimated)."""
        found = self.costs.get(key) if isinstance(key, str) else self.day_costs.get(key)
        return shown(found or Cost(0.0))


@dataclass(frozen=True)
class Quiet:
    """Days in a row without spend, folded into one line of the table."""

    first: date
    last: date

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1


def folded(rows: Iterable[DayRow]) -> list[DayRow | Quiet]:
    """``rows`` (newest first) with each stretch of days without spend as one ``Quiet``."""
    found: list[DayRow | Quiet] = []
    for row in rows:
        if row.total:
            found.append(row)
        elif found and isinstance(found[-1], Quiet):
            found[-1] = Quiet(row.day, found[-1].last)
        else:
            found.append(Quiet(row.day, row.day))
    return found


def first_day(today: date) -> date:
    return today - timedelta(days=DAYS - 1)


def spend_table(counts: Iterable[DayUsage], today: date, prices: PriceTable | None = None) -> Spend:
    start = first_day(today)
    table = prices or PriceTable()
    rows = [DayRow(start + timedelta(days=i)) for i in range(DAYS)]
    costs = {kind: Cost(0.0) for kind in (*KINDS, "all")}
    day_costs: dict[date, Cost] = {}
    models: dict[str, ModelRow] = {}
    for count in counts:
        index = (count.day - start).days
        if 0 <= index < DAYS:
            rows[index].input[count.kind] += count.input
            rows[index].output[count.kind] += count.output
            cost = table.cost(count.model, count.input, count.output, count.cached_input)
            costs[count.kind] += cost
            costs["all"] += cost
            day_costs[count.day] = day_costs.get(count.day, Cost(0.0)) + cost
            price = table.price_of(count.model)[0]
            row = models.setdefault(count.model, ModelRow(count.model, price=price))
            row.input += count.input
            row.output += count.output
            row.cached_input += count.cached_input
            row.cost += cost
    totals: dict[str, dict[str, int]] = {}
    for kind in (*KINDS, "all"):
        kinds: tuple[str, ...] = KINDS if kind == "all" else (kind,)
        spent_in = sum(row.input[k] for row in rows for k in kinds)
        spent_out = sum(row.output[k] for row in rows for k in kinds)
        totals[kind] = {"input": spent_in, "output": spent_out, "total": spent_in + spent_out}
    by_cost = sorted(models.values(), key=lambda m: (-m.cost.usd, m.model))
    return Spend(rows, totals, costs, day_costs, by_cost)


def compact(number: float) -> str:
    """``950``, ``12.3k``, ``4.1M``."""
    if number >= 1_000_000:
        return f"{number / 1_000_000:.1f}M"
    if number >= 1_000:
        return f"{number / 1_000:.1f}k"
    return f"{number:.0f}"


def _scale_top(largest: int) -> int:
    """A round number at or above ``largest`` for the y axis."""
    if largest <= 0:
        return 100
    step: int = 10 ** (len(str(largest)) - 1)
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        top = int(step * factor)
        if top >= largest:
            return top
    return int(step * 10)


def spend_svg(spend: Spend, side: Side) -> Markup:
    rows = spend.rows
    top = _scale_top(max((sum(r.side(side).values()) for r in rows), default=0))
    height = TOP + PLOT_H + 22
    base = TOP + PLOT_H
    parts = [
        f'<svg class="spend-chart" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-labelledby="spend-{side}-title" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="spend-{side}-title">{side.capitalize()} tokens per day, last {DAYS} '
        "days, by chat, cron and pulse</title>",
    ]
    for fraction in (0, 0.5, 1):
        y = base - fraction * PLOT_H
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - 8}" y2="{y:.1f}" '
            'stroke="currentColor" stroke-opacity="0.18"/>'
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
            f'fill="currentColor" fill-opacity="0.75">{compact(top * fraction)}</text>'
        )
    for i, row in enumerate(rows):
        x = LEFT + i * SLOT + (SLOT - BAR_W) / 2
        day = row.day.strftime("%a %d %b")
        values = row.side(side)
        y = base
        total = sum(values.values())
        parts.append(f'<g class="day" data-day="{row.day.isoformat()}" data-total="{total}">')
        parts.append(f"<title>{escape(day)}: {total:,} {side} tokens</title>")
        for kind in KINDS:
            value = values[kind]
            if not value:
                continue
            h = value / top * PLOT_H
            y -= h
            words = escape(f"{day}: {kind} {value:,} {side} tokens")
            parts.append(
                f'<rect class="seg seg-{kind}" data-kind="{kind}" data-value="{value}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{BAR_W:.1f}" height="{h:.1f}" '
                f'fill="{KIND_COLOURS[kind]}"><title>{words}</title></rect>'
            )
        parts.append("</g>")
        back = len(rows) - 1 - i  # days before today
        if back % 5 == 0:  # every 5th day, today last; a phone shows every 10th (.minor)
            parts.append(
                f'<text class="date{" minor" if back % 10 else ""}" x="{x + BAR_W / 2:.1f}" '
                f'y="{base + 16}" font-size="10" text-anchor="middle" fill="currentColor" '
                f'fill-opacity="0.75">{row.day.strftime("%d %b")}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def kind_colour(kind: UsageKind | str) -> str:
    return KIND_COLOURS.get(kind, "#777")


def register(router: web.UrlDispatcher, dash: Dashboard) -> None:
    async def spend_page(request: web.Request) -> web.StreamResponse:
        today = dash.now().astimezone(dash.tz).date()
        counts = await dash.app.deps.usage.since(first_day(today))
        spend = spend_table(counts, today, await load_prices(dash.app.deps.db))
        context = {
            "days": DAYS,
            "kinds": KINDS,
            "colours": KIND_COLOURS,
            "spend": spend,
            "rows": folded(reversed(spend.rows)),
            "input_chart": spend_svg(spend, "input"),
            "output_chart": spend_svg(spend, "output"),
            "shown": shown,
            "budget": await dash.app.deps.budget.view(),
            "max_model_chars": MAX_MODEL_CHARS,
            "max_price_chars": MAX_PRICE_CHARS,
        }
        return dash.render(request, "spend.html", context)

    async def price_change(request: web.Request) -> web.StreamResponse:
        """One model's price (USD per million input, output and cached input tokens; the
        last optional), or ``default``."""
        form = await request.post()
        model = str(form.get("model", ""))
        given = [str(form.get(side, "")) for side in ("input", "output", "cached")]
        try:
            price = await set_price(dash.app.deps.db, model, *given)
        except PriceError as exc:
            return dash.done(request, "/spend", f"Nothing changed: {exc}.")
        name = model_name(model)
        text = f"Priced {name} at ${price.input:g} in / ${price.output:g} out"
        if price.cached is not None:
            text += f" / ${price.cached_input:g} cached in"
        return dash.done(request, "/spend", text + " per million tokens.")

    dash.get(router, "/spend", spend_page)
    dash.post(router, "/spend/prices", price_change)
