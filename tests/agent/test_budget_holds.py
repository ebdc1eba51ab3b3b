"""Issue 36, item 7: a cap that holds. Every model call reserves its bound before it is
made and settles after, in one ledger every process on the database shares.

The whole app on the real OpenAI adapter and the fake OpenAI server (each answer states
its usage); a fake clock in Berlin. 40 chats at once against a 20,000-token cap end
within one call of it; a second app on the same database counts; moving the timezone
opens no new day; a reservation whose process died stops counting.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from agent.llm.types import ModelMessage, TextPart, ToolSpec
from agent.spend.budget import (
    MIN_DAY,
    RESERVATION_TTL,
    BudgetView,
    Hold,
    TokenBudget,
    next_day,
    request_bound,
    reservation_ttl,
)
from storage.repos.token_budget import Ledger
from storage.repos.usage import UsageLog
from tests.agent.test_budget import NOW, OWNER_TG, SPENT, SPENT_TITLE, WARNED, _drop, rig
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer
from tests.tokens import count_tokens

Doc = dict[str, Any]
KIRITIMATI = ZoneInfo("Pacific/Kiritimati")
"""UTC+14: at 15:00 in Berlin it is already tomorrow there."""


@pytest.fixture
async def api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(model="gpt-4.1-mini") as fake:
        yield fake


pytestmark = pytest.mark.clock(NOW)


async def test_forty_chats_at_once_end_within_one_call_of_the_cap(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    """Seen: 40 chats at once against 20,000 tokens used 88,000."""
    cap, per_call = 20_000, 2_000
    owners = [OWNER_TG + n for n in range(40)]
    # Each answer takes a moment, so the chats' calls overlap as they would for real.
    api.default = Answer(200, api.completion("ok", usage=(1_500, 500)), delay=0.2)
    async with rig(
        app_db, tmp_path, api, clock,
        budget=cap, owner_telegram_ids=owners, max_output_tokens=1_000,
    ) as r:  # fmt: skip
        await asyncio.gather(*(r.chat.say(f"question {n}", sender=n) for n in owners))
        await r.app.pipeline.join()
        used = per_call * len(api.requests)
        assert cap <= used <= cap + per_call  # one reservation at most (it is >= one call)
        assert {body["max_tokens"] for body in api.bodies} == {1_000}
        view = await r.app.deps.budget.view()
        assert (view.used, view.spent) == (used, True)
        counts = await r.app.deps.usage.since(NOW.date())
        assert sum(c.total for c in counts) == used
        for owner in owners:  # every chat answered: by the model or with the short answer
            texts = r.chat.texts(str(owner))
            [answer] = [t for t in texts if WARNED not in t and SPENT_TITLE not in t]
            assert answer == "ok" or SPENT in answer
        titles = [a["title"] for a in await r.budget_alerts()]
        assert sorted(titles) == [SPENT_TITLE, "Token budget 80% used today"]


async def test_a_second_process_on_the_database_counts(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    """``watchkeeper chat`` beside ``watchkeeper run``: two apps, one database, one cap."""
    db_name = f"budget_{uuid.uuid4().hex[:10]}"
    try:
        async with (
            rig(app_db, tmp_path / "run", api, clock, db_name=db_name) as run,
            rig(
                app_db,
                tmp_path / "chat",
                api,
                clock,
                db_name=db_name,
                chat=RecordingChannel("console", sender="owner", clock=clock),
                exclusive=False,
            ) as chat,  # fmt: skip
        ):
            api.reply_text("from run", usage=(50, 10))  # 60 of 100
            assert await run.ask("hello") == ["from run"]
            api.reply_text("from chat", usage=(40, 10))  # 110: the other process spent it
            sent = await chat.ask("hi")
            assert "from chat" in sent
            # The notice the other process raised may go out meanwhile, by either.
            [answer] = [t for t in await run.ask("and now?") if SPENT_TITLE not in t]
            assert SPENT in answer and "110 of 100 tokens" in answer
            assert len(api.requests) == 2
            assert (await run.app.deps.budget.view()).used == 110
    finally:
        await _drop(app_db, db_name)


async def test_moving_the_timezone_opens_no_new_day(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    """Seen: moving the timezone after 88% used allowed 1.76x the cap in one real day."""
    async with rig(app_db, tmp_path, api, clock) as r:
        api.reply_text("morning", usage=(80, 8))  # 88 of 100 on the 26th in Berlin
        assert "morning" in await r.ask("hello")
        await r.app.deps.owner.update(timezone="Pacific/Kiritimati")  # the 27th there
        api.reply_text("after the move", usage=(10, 5))  # 103: over, the round finishes
        assert "after the move" in await r.ask("still?")
        [answer] = await r.ask("and now?")
        # The day open when the zone moved closes when it would have: Berlin's midnight.
        assert SPENT in answer and "103 of 100 tokens" in answer
        assert "resets at 13:00 Pacific/Kiritimati (in 9 h 0 min)" in answer
        clock.set(datetime(2026, 11, 26, 22, 59, tzinfo=UTC))  # 23:59 Berlin, 12:59 there
        [answer] = await r.ask("now?")
        assert SPENT in answer and len(api.requests) == 2
        clock.set(datetime(2026, 11, 26, 23, 0, 1, tzinfo=UTC))  # Berlin's day is over
        api.reply_text("new day", usage=(100, 0))
        assert "new day" in await r.ask("new day?")
        # Kiritimati's next midnight is 11 h away: the new day runs to the one after.
        clock.set(datetime(2026, 11, 27, 10, 0, 1, tzinfo=UTC))
        [answer] = await r.ask("and now?")
        assert SPENT in answer and "100 of 100 tokens" in answer
        assert "resets at 00:00 Pacific/Kiritimati (in 23 h 59 min)" in answer
        assert len(api.requests) == 3


def test_a_budget_day_after_a_move_east_lasts_at_least_min_day() -> None:
    berlin_day = Ledger(date(2026, 11, 26), datetime(2026, 11, 26, 23, tzinfo=UTC), 100, 100)
    now = datetime(2026, 11, 26, 23, 0, 1, tzinfo=UTC)
    day, ends = next_day(now, KIRITIMATI, berlin_day)
    assert ends - berlin_day.ends >= MIN_DAY
    assert (day, ends) == (date(2026, 11, 28), datetime(2026, 11, 28, 10, tzinfo=UTC))
    # Without a move, the next day is the owner's next one, summer time or not.
    assert next_day(now, BERLIN, berlin_day) == (
        date(2026, 11, 27),
        datetime(2026, 11, 27, 23, tzinfo=UTC),
    )
    spring = Ledger(date(2026, 3, 28), datetime(2026, 3, 28, 23, tzinfo=UTC), 0, 0)
    assert next_day(spring.ends, BERLIN, spring) == (
        date(2026, 3, 29),
        datetime(2026, 3, 29, 22, tzinfo=UTC),  # a 23-hour day
    )
    # Moved west, the date there is not later: the next day is the one after it.
    new_york = ZoneInfo("America/New_York")
    assert next_day(now, new_york, berlin_day) == (
        date(2026, 11, 27),
        datetime(2026, 11, 28, 5, tzinfo=UTC),
    )


def _budget(db: AsyncDatabase[Doc], clock: FakeClock, limit: int = 1_000) -> TokenBudget:
    """One process's budget: its own usage counts and memory, the shared database."""

    async def notify(title: str, body: str, key: str) -> None:
        return None

    return TokenBudget(
        UsageLog(db, flush_seconds=0), db, limit, clock, lambda: BERLIN, notify, max_output=500
    )


async def test_a_call_waits_while_the_cap_is_held_by_calls_in_flight(
    db: AsyncDatabase[Doc],
) -> None:
    clock = FakeClock(NOW)
    first, second = _budget(db, clock), _budget(db, clock)
    hold = await first.reserve(500)  # 1,000 of 1,000 held, none used
    assert isinstance(hold, Hold)
    waiting = asyncio.create_task(second.reserve(100))
    done, _ = await asyncio.wait({waiting}, timeout=1)
    assert not done  # it waits for the call in flight: the cap is held, not spent
    await first.settle(hold, "chat", "gpt-4.1-mini", 300, 100, first=True)  # 400 used
    held = await asyncio.wait_for(waiting, 10)
    assert isinstance(held, Hold) and held.tokens == 600  # let through, not told "spent"
    await second.settle(held, "chat", "gpt-4.1-mini", 500, 200, first=True)  # 1,100
    spent = await first.reserve(10)
    assert isinstance(spent, BudgetView) and spent.used == 1_100


async def test_a_reservation_whose_process_died_stops_counting(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(NOW)
    killed = _budget(db, clock)
    assert isinstance(await killed.reserve(500), Hold)  # killed before it settled
    restarted = _budget(db, clock)
    assert not (await restarted.view()).spent  # held, not spent
    clock.advance(RESERVATION_TTL + timedelta(seconds=1))
    hold = await asyncio.wait_for(restarted.reserve(100), 10)
    assert isinstance(hold, Hold)
    ledger = await db["usage"].find_one({"_id": "budget"})
    assert ledger is not None and ledger["held"] == 600
    assert [entry["n"] for entry in ledger["procs"].values()] == [600]  # the killed one's gone
    await restarted.settle(hold, "chat", "m", 200, 50, first=True)
    view = await restarted.view()
    assert (view.used, view.spent) == (250, False)
    ledger = await db["usage"].find_one({"_id": "budget"})
    assert ledger is not None and ledger["held"] == 250


def test_a_reservation_outlasts_the_slowest_call_with_its_retries() -> None:
    assert reservation_ttl(60) == RESERVATION_TTL  # 4 tries of 60 s, fallback: 30 min
    assert reservation_ttl(900) == timedelta(seconds=9_000)  # a local model on a CPU


async def test_a_failed_call_frees_its_reservation(db: AsyncDatabase[Doc]) -> None:
    clock = FakeClock(NOW)
    budget = _budget(db, clock)
    hold = await budget.reserve(500)
    assert isinstance(hold, Hold)
    await budget.release(hold)
    again = await asyncio.wait_for(budget.reserve(500), 10)
    assert isinstance(again, Hold)
    assert (await budget.view()).used == 0


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog. " * 40,
        '{"items": [{"id": 1, "name": "alpha", "tags": ["x", "y"]}]} ' * 40,
        "我们今天去公园散步然后吃饭" * 40,
        "Привет, как дела? Сегодня хорошая погода. " * 40,
        "😀🎉👍🏽🚀" * 100,
        "def f(x):\n    return [i * 2 for i in range(x) if i % 3]\n" * 40,
    ],
)
def test_the_input_estimate_is_on_the_high_side(text: str) -> None:
    message = ModelMessage(role="user", parts=[TextPart(text=text)])
    spec = ToolSpec(name="t", description=text[:200], parameters={"type": "object"})
    real = count_tokens(text) + count_tokens(text[:200])
    assert request_bound("", [message], [spec]) >= real


async def test_raising_the_budget_resolves_its_spent_alert(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    """Issue 40: the "daily token budget spent" alert stayed open after the raise."""
    db_name = f"budget_{uuid.uuid4().hex[:10]}"
    try:
        async with rig(app_db, tmp_path, api, clock, db_name=db_name) as r:
            api.reply_text("spent", usage=(100, 10))
            await r.ask("go")
            [spent] = [a for a in await r.budget_alerts() if a["title"] == SPENT_TITLE]
            assert spent["status"] == "open"
        async with rig(
            app_db, tmp_path, api, clock, db_name=db_name, chat=r.chat, budget=1_000
        ) as r:  # DAILY_TOKEN_BUDGET raised, restarted
            api.reply_text("back", usage=(10, 5))
            assert "back" in await r.ask("again")
            [spent] = [a for a in await r.budget_alerts() if a["title"] == SPENT_TITLE]
            assert spent["status"] == "resolved"
            api.reply_text("all of it", usage=(900, 0))  # 1,025 of 1,000: told again
            sent = await r.ask("more")
            assert "all of it" in sent and any(SPENT_TITLE in t for t in sent)
    finally:
        await _drop(app_db, db_name)
