"""Issue 37, item 8: the budget's database work per model call. Each process holds a block
of the day's headroom and lets calls through from it; what they used is counted in one
command for all settled together. The cap, the expiry of a killed process's hold and the
notices stay as ``tests/agent/test_budget_holds.py`` has them.

One or two ``TokenBudget`` (one per process) on the real database; the ledger's client
records its commands (``watched``), the usage counts go through a client of their own.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.spend.budget import RESERVATION_TTL, BudgetView, Hold, TokenBudget
from storage.repos.usage import UsageLog
from tests.agent.test_budget import NOW
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.commands import Commands
from tests.fakes.fixtures import watched

__all__ = ["watched"]  # a fixture, imported for pytest

Doc = dict[str, Any]
pytestmark = pytest.mark.clock(NOW)
IN, OUT = 1_500, 500
"""Every call's input bound and the most it may write: 2,000 tokens reserved."""
PER_CALL = IN + OUT


def _budget(
    ledger_db: AsyncDatabase[Doc],
    db: AsyncDatabase[Doc],
    clock: FakeClock,
    limit: int,
    *,
    settle_seconds: float = 0.5,
) -> TokenBudget:
    """One process's budget: the ledger on ``ledger_db``, its usage counts on ``db``."""

    async def notify(title: str, body: str, key: str) -> None:
        return None

    return TokenBudget(
        UsageLog(db, flush_seconds=0), ledger_db, limit, clock, lambda: BERLIN, notify,
        max_output=OUT, settle_seconds=settle_seconds,
    )  # fmt: skip


def _ledger_commands(commands: Commands) -> int:
    return sum(n for name, n in commands.counts.items() if name.endswith(" usage"))


async def _ledger(db: AsyncDatabase[Doc]) -> Doc:
    found = await db["usage"].find_one({"_id": "budget"})
    assert found is not None
    return found


async def test_a_burst_of_calls_takes_a_few_ledger_commands_not_two_each(
    watched: tuple[AsyncDatabase[Doc], Commands], db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """Seen: 100 chats at once sent 264 commands to the ledger (a reservation and a
    settlement each, and the calls refused read it again): half the database's CPU."""
    ledger_db, commands = watched
    budget = _budget(ledger_db, db, clock, limit=75 * PER_CALL)  # 75 of 100 in flight
    in_flight, go = asyncio.Event(), asyncio.Event()
    held = 0

    async def call() -> None:
        nonlocal held
        hold = await budget.reserve(IN)
        assert isinstance(hold, Hold) and hold.tokens == PER_CALL
        held += 1
        if held == 75:
            in_flight.set()
        await go.wait()
        await budget.settle(hold, "chat", "gpt-4.1-mini", 500, 100, first=True)

    calls = [asyncio.create_task(call()) for _ in range(100)]
    await asyncio.wait_for(in_flight.wait(), 10)
    assert held == 75  # the cap is held: the rest wait for these to settle
    go.set()
    await asyncio.wait_for(asyncio.gather(*calls), 10)  # every call made
    assert held == 100
    view = await budget.view()
    assert (view.used, view.spent) == (100 * 600, False)
    ledger = await _ledger(db)
    assert ledger["used"] == ledger["held"] == 60_000  # the block given back, idle
    assert _ledger_commands(commands) <= 10, commands.counts


async def test_two_processes_end_within_one_reservation_of_the_cap(
    watched: tuple[AsyncDatabase[Doc], Commands], db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """``watchkeeper run`` and ``watchkeeper chat``, ten chats each, calling until the day's
    budget is spent: one cap, gone past by one call at most, with fewer ledger commands
    than calls."""
    ledger_db, commands = watched
    cap = 400_000  # some 270 calls
    budgets = [_budget(ledger_db, db, clock, cap), _budget(ledger_db, db, clock, cap)]
    made = 0

    async def chat(budget: TokenBudget) -> None:
        nonlocal made
        while True:
            hold = await budget.reserve(IN)
            if isinstance(hold, BudgetView):
                return
            made += 1
            await asyncio.sleep(0)  # the model answers
            await budget.settle(hold, "chat", "gpt-4.1-mini", 1_000, 500, first=True)

    chats = [chat(budget) for budget in budgets for _ in range(10)]
    await asyncio.wait_for(asyncio.gather(*chats), 30)
    for budget in budgets:
        await budget.close()  # the app stops: what it used counted, its block given back
    ledger = await _ledger(db)
    assert ledger["used"] == ledger["held"] == 1_500 * made
    assert cap <= ledger["used"] <= cap + PER_CALL
    assert _ledger_commands(commands) < made, (made, commands.counts)
    for budget in budgets:
        assert (await budget.view()).spent


async def test_a_process_killed_with_a_block_frees_it_after_hold_for(
    watched: tuple[AsyncDatabase[Doc], Commands], db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    ledger_db, commands = watched
    killed = _budget(ledger_db, db, clock, 6 * PER_CALL, settle_seconds=3_600)
    await killed.view()  # the day known: what follows is the calls' own
    commands.clear()
    holds = await asyncio.gather(*(killed.reserve(IN) for _ in range(6)))
    assert all(isinstance(hold, Hold) for hold in holds)
    assert _ledger_commands(commands) == 2  # a block for the first, grown for the rest
    [first, *_] = holds
    assert isinstance(first, Hold)
    await killed.settle(first, "chat", "m", 1_000, 500, first=True)  # not counted yet
    # Killed now (``kill -9``): its block holds the whole cap.
    other = _budget(ledger_db, db, clock, 6 * PER_CALL)
    waiting = asyncio.create_task(other.reserve(IN))
    done, _ = await asyncio.wait({waiting}, timeout=0.6)
    assert not done  # held by the killed process's block, which may still be calling
    clock.advance(RESERVATION_TTL + timedelta(seconds=1))
    assert isinstance(await asyncio.wait_for(waiting, 10), Hold)
    ledger = await _ledger(db)
    assert (ledger["held"], ledger["used"]) == (PER_CALL, 0)
    [entry] = ledger["procs"].values()  # the killed process's is gone
    assert entry["n"] == PER_CALL


async def test_a_block_lets_calls_through_only_for_a_while_then_renews_its_hold(
    watched: tuple[AsyncDatabase[Doc], Commands], db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    """A process killed holds its block ``hold_for`` after its last reservation at most:
    the block lets calls through for ``renew_every`` after it grew, then one command
    renews its hold."""
    ledger_db, commands = watched
    budget = _budget(ledger_db, db, clock, 100 * PER_CALL, settle_seconds=3_600)
    for hold in await asyncio.gather(budget.reserve(IN), budget.reserve(IN)):
        assert isinstance(hold, Hold)
        await budget.release(hold)  # the block keeps two calls' worth, free
    commands.clear()
    clock.advance(budget.renew_every - timedelta(seconds=1))
    hold = await budget.reserve(IN)
    assert isinstance(hold, Hold)
    await budget.release(hold)
    assert _ledger_commands(commands) == 0  # from the block
    clock.advance(timedelta(seconds=2))
    assert isinstance(await budget.reserve(IN), Hold)
    assert _ledger_commands(commands) == 1  # its hold renewed, no more held
    ledger = await _ledger(db)
    [entry] = ledger["procs"].values()
    assert entry["until"] == clock() + RESERVATION_TTL
    assert ledger["held"] == entry["n"] == 2 * PER_CALL


async def test_a_stopping_app_gives_its_block_back_at_once(
    db: AsyncDatabase[Doc], clock: FakeClock
) -> None:
    budget = _budget(db, db, clock, 3 * PER_CALL, settle_seconds=3_600)
    holds = await asyncio.gather(*(budget.reserve(IN) for _ in range(3)))
    [first, second, third] = holds
    assert isinstance(first, Hold) and isinstance(second, Hold) and isinstance(third, Hold)
    await budget.settle(first, "chat", "m", 1_000, 500, first=True)
    await budget.release(second)
    await budget.close()  # the third's call was cut short: it holds its reservation
    ledger = await _ledger(db)
    assert (ledger["used"], ledger["held"]) == (1_500, 1_500 + PER_CALL)
    restarted = _budget(db, db, clock, 3 * PER_CALL)
    assert isinstance(await asyncio.wait_for(restarted.reserve(IN), 1), Hold)
