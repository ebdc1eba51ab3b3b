"""What the owner has spent, in the words a chat answer needs: today's tokens against
the daily budget, dollars today and this month, and when the budget resets.

``manage_settings`` (``get``) answers it, so "how much have I spent today?" is one
call; ``/status`` and ``/api/status`` read the same figures (``agent.app.status``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from agent.spend.budget import BudgetView, TokenBudget
from agent.spend.prices import Cost, PriceTable, load_prices, shown
from storage.repos.usage import DayUsage, UsageLog


@dataclass(frozen=True)
class SpendReport:
    view: BudgetView
    today: Cost
    month: Cost
    estimated: tuple[str, ...]
    """Models that were priced at the default (missing from the price table)."""

    def as_result(self) -> dict[str, object]:
        """The figures as a tool answers them (datetimes shown in the owner's zone)."""
        view = self.view
        result: dict[str, object] = {
            "tokens_today": view.used,
            "daily_token_limit": view.limit if view.capped else "none (no daily cap)",
            "usd_today": shown(self.today),
            "usd_this_month": shown(self.month),
            "budget_resets_at": view.resets_at,
        }
        if view.spent:
            result["budget_spent"] = "the daily budget is used up: no model call until it resets"
        if self.estimated:
            result["estimated_for"] = list(self.estimated)
        return result


def month_start(day: date) -> date:
    return day.replace(day=1)


def priced(counts: list[DayUsage], prices: PriceTable) -> tuple[Cost, tuple[str, ...]]:
    unknown = sorted({c.model or "(unknown)" for c in counts if prices.price_of(c.model)[1]})
    return prices.total(counts), tuple(unknown)


async def spend_report(
    budget: TokenBudget, usage: UsageLog, db: AsyncDatabase[dict[str, Any]]
) -> SpendReport:
    """Today's budget and what today and this month cost (one read of at most a
    month's small ``usage`` documents)."""
    view = await budget.view()
    counts = await usage.since(month_start(view.day))
    prices = await load_prices(db)
    today = [c for c in counts if c.day == view.day]
    cost_today, estimated = priced(today, prices)
    cost_month, _ = priced(counts, prices)
    return SpendReport(view, cost_today, cost_month, estimated)
