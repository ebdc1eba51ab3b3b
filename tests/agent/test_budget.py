"""Issue 30, item 4: the daily token budget holds. The whole app (alerts and scheduler on)
on the real OpenAI adapter pointed at the fake OpenAI server, the owner on a recording
Telegram chat, a fake clock in Berlin.

Each scripted answer states its usage, so the budget's arithmetic is exact: the 80%
notice once (also across a restart), chat answered without a request at 100%, a turn
that crosses the cap in its tool loop, pulse and cron skipped with the reason and the
owner told once, an alert still acknowledged, a restart that keeps the cap, the owner's
midnight that resets it, 0 for no cap.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.alerts.router import AlertRouter
from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.llm.openai.model import OpenAIModel
from agent.spend.prices import DEFAULT_PRICE, PriceTable, load_prices, save_prices, usd
from storage.repos.prices import PriceError, check_price
from storage.repos.usage import DayUsage
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer
from tests.scheduling_kit import parts_of

Doc = dict[str, Any]
OWNER_TG = 4242
NOW = datetime(2026, 11, 26, 15, 0, tzinfo=BERLIN)
SPENT = "daily token budget is spent"
WARNED = "Token budget"
SPENT_TITLE = "Daily token budget spent"


@dataclass
class Rig:
    app: App
    api: FakeOpenAI
    chat: RecordingChannel
    clock: FakeClock

    async def ask(self, text: str) -> list[str]:
        """Say ``text`` as the owner on Telegram; what was sent meanwhile (answer, notices)."""
        before = len(self.chat.sent)
        await self.chat.say(text)
        await self.app.pipeline.join()
        return self.chat.texts()[before:]

    async def budget_alerts(self) -> list[Doc]:
        return await self.app.deps.db["alerts"].find({"source": "budget"}).to_list()

    @property
    def router(self) -> AlertRouter:
        router = self.app.deps.alerts
        assert isinstance(router, AlertRouter)
        return router


@contextlib.asynccontextmanager
async def rig(
    app_db: AppDb,
    tmp_path: Path,
    api: FakeOpenAI,
    clock: FakeClock,
    *,
    db_name: str | None = None,
    budget: int = 100,
    chat: RecordingChannel | None = None,
    exclusive: bool = True,
    **settings: Any,
) -> AsyncIterator[Rig]:
    """The app; a given ``db_name`` outlives it (a restart builds it again, with the same
    ``chat``: its message ids go on). ``settings``: more of its settings; ``exclusive``
    False: beside another app on the database, as ``watchkeeper chat``."""
    name = db_name or f"budget_{uuid.uuid4().hex[:10]}"
    config = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=name,
        data_dir=tmp_path,
        openai_api_key="sk-test",
        timezone="Europe/Berlin",
        daily_token_budget=budget,
        **{"owner_telegram_ids": [OWNER_TG], **settings},
    )
    model = OpenAIModel(
        "sk-test", "gpt-4.1-mini", base_url=api.base_url, max_output_tokens=config.max_output_tokens
    )
    chat = chat or RecordingChannel("telegram", sender=OWNER_TG, clock=clock)
    features = [
        alerting(AlertingOptions(background=False)),
        scheduling(SchedulingOptions(timer=False)),
    ]
    try:
        async with build_app(
            config,
            embedded=app_db.server,
            model=model,
            channels=[chat],
            clock=clock,
            features=features,
            exclusive_transports=exclusive,
        ) as app:
            try:
                yield Rig(app, api, chat, clock)
            finally:
                if db_name is None:
                    await app.database.client.drop_database(name)
    finally:
        await model.aclose()


@pytest.fixture
async def api() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(model="gpt-4.1-mini") as fake:
        yield fake


pytestmark = pytest.mark.clock(NOW)


def tool_round(api: FakeOpenAI, name: str, args: dict[str, Any], usage: tuple[int, int]) -> None:
    """A scripted answer calling one tool, with its usage."""
    call = {
        "id": f"call_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    api.push(Answer(200, api.completion(None, [call], usage=usage)))


async def test_the_owner_is_told_once_at_80_percent_even_across_a_restart(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    db_name = f"budget_{uuid.uuid4().hex[:10]}"
    try:
        async with rig(app_db, tmp_path, api, clock, db_name=db_name) as r:
            api.reply_text("first", usage=(50, 20))  # 70%: nothing yet
            assert await r.ask("hello") == ["first"]
            api.reply_text("second", usage=(8, 4))  # 82%
            sent = await r.ask("and?")
            assert "second" in sent
            notices = [t for t in sent if WARNED in t]
            assert len(notices) == 1 and "82% used today" in notices[0]
            assert "82 of 100 tokens" in notices[0] and "DAILY_TOKEN_BUDGET" in notices[0]
            api.reply_text("third", usage=(2, 1))  # 85%: told already
            assert await r.ask("more") == ["third"]
            [alert] = await r.budget_alerts()
            assert alert["severity"] == "info"
        async with rig(app_db, tmp_path, api, clock, db_name=db_name, chat=r.chat) as r:
            api.reply_text("after restart", usage=(2, 1))  # 88%, a new process
            assert await r.ask("still there?") == ["after restart"]
            assert len(await r.budget_alerts()) == 1
            assert len(api.requests) == 4
    finally:
        await _drop(app_db, db_name)


async def test_at_100_percent_chat_answers_without_the_model(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock) as r:
        api.reply_text("that was expensive", usage=(90, 20))  # 110 of 100
        sent = await r.ask("write me an essay")
        assert "that was expensive" in sent
        assert [t for t in sent if SPENT_TITLE in t]  # told as it crossed
        asked = len(api.requests)
        sent = await r.ask("one more thing")
        assert len(api.requests) == asked  # no request reached the model server
        [answer] = sent  # told once already: only the short answer
        assert SPENT in answer and "110 of 100 tokens" in answer
        assert "resets at 00:00 Europe/Berlin (in 9 h 0 min)" in answer
        assert "DAILY_TOKEN_BUDGET in .env" in answer and "Your message is saved" in answer
        stored = await r.app.deps.db["messages"].find({}, sort=[("seq", 1)]).to_list()
        texts = [p.get("text") for m in stored for p in m.get("parts", [])]
        assert "one more thing" in texts and answer in texts  # nothing lost
        [told] = [a for a in await r.budget_alerts() if a["title"] == SPENT_TITLE]
        assert "monitors, alerts and alert replies keep working" in told["body"]


async def test_when_the_cap_stops_a_task_the_answer_says_what_took_effect(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock, budget=50) as r:
        remind = {"action": "create", "name": "Call Bob", "instruction": "remind me to call Bob",
                  "in_minutes": 60}  # fmt: skip
        tool_round(api, "manage_cronjob", remind, usage=(50, 5))  # 55: over the cap
        api.reply_text("never asked for", usage=(1, 1))
        sent = await r.ask("remind me in an hour to call Bob")
        [answer] = [t for t in sent if "stopped before finishing" in t]
    assert 'What took effect before it stopped: manage_cronjob created "Call Bob" (' in answer


async def test_a_turn_that_crosses_the_cap_finishes_its_round_then_stops(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock, budget=50) as r:
        tool_round(api, "manage_settings", {"action": "get"}, usage=(20, 5))  # 25: half
        tool_round(api, "manage_pulse", {"action": "get_config"}, usage=(25, 5))  # 55: over
        api.reply_text("never asked for", usage=(1, 1))
        sent = await r.ask("check my settings and the pulse")
        assert len(api.requests) == 2  # the round that crossed ran its tool; no third call
        [answer] = [t for t in sent if "stopped before finishing" in t]
        assert "2 tool calls done: manage_pulse, manage_settings" in answer
        assert "55 of 50 tokens" in answer and "DAILY_TOKEN_BUDGET" in answer
        stored = await r.app.deps.db["messages"].find({}, sort=[("seq", 1)]).to_list()
        roles = [m["role"] for m in stored]
        assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        pulse_result = stored[4]["parts"][0]["result"]
        assert "error" not in pulse_result  # the crossing round's tool did run
        assert stored[-1]["parts"][0]["text"] == answer
        counts = await r.app.deps.usage.since(NOW.date())
        assert [(c.model, c.input, c.output, c.exchanges) for c in counts] == [
            ("gpt-4.1-mini", 45, 10, 1)  # two calls, one exchange
        ]


async def test_pulse_and_cron_are_skipped_with_the_reason_and_the_owner_told_once(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock) as r:
        usage = r.app.deps.usage  # spent earlier today (another process, say)
        usage.add(NOW.date(), "chat", 100, 20, model="gpt-4.1-mini")
        await usage.flush()
        jobs = parts_of(r.app).jobs
        await jobs.create(
            name="Backups",
            instruction="Check the backups",
            cron_expression="30 15 * * *",
            timezone="Europe/Berlin",
        )
        clock.set(NOW.replace(minute=30, second=1))
        await parts_of(r.app).engine.run_due()
        await parts_of(r.app).engine.run_pulse_now("manual")
        await r.app.pipeline.join()
        runs = await r.app.deps.db["runs"].find({}, sort=[("kind", 1)]).to_list()
        assert [(run["kind"], run["status"], run["reason"]) for run in runs] == [
            ("cron", "skipped", "budget_spent"),
            ("pulse", "skipped", "budget_spent"),
        ]
        for run in runs:
            assert "daily token budget spent (120 of 100 tokens)" in run["error"]
            assert "resets at 00:00 Europe/Berlin" in run["error"]
        assert api.requests == []
        told = [t for t in r.chat.texts() if SPENT_TITLE in t]
        assert len(told) == 1 and "pulses and cron jobs are skipped" in told[0]
        assert not [t for t in r.chat.texts() if "did not complete" in t]


async def test_an_alert_is_still_acknowledged_at_100_percent(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock) as r:
        api.reply_text("done", usage=(100, 5))
        await r.ask("use it all")
        asked = len(api.requests)
        alert = await r.router.raise_alert(severity="warning", title="Disk almost full")
        sent = await r.ask(f"ack #{alert.code}")
        assert any("acknowledged" in t.lower() for t in sent), sent
        stored = await r.app.deps.db["alerts"].find_one({"code": alert.code})
        assert stored is not None and stored["status"] == "acknowledged"
        assert len(api.requests) == asked


async def test_a_restart_at_100_percent_keeps_the_cap(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    db_name = f"budget_{uuid.uuid4().hex[:10]}"
    try:
        async with rig(app_db, tmp_path, api, clock, db_name=db_name) as r:
            api.reply_text("spent", usage=(95, 10))  # counted in memory, written at stop
            await r.ask("go")
        async with rig(app_db, tmp_path, api, clock, db_name=db_name, chat=r.chat) as r:
            [answer] = await r.ask("again")
            assert SPENT in answer and "105 of 100 tokens" in answer
            assert len(api.requests) == 1
            assert len([a for a in await r.budget_alerts() if a["title"] == SPENT_TITLE]) == 1
    finally:
        await _drop(app_db, db_name)


async def test_the_owners_midnight_resets_the_budget(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    clock.set(datetime(2026, 11, 26, 23, 50, tzinfo=BERLIN))  # 22:50 UTC
    async with rig(app_db, tmp_path, api, clock) as r:
        api.reply_text("late", usage=(100, 0))
        await r.ask("late question")
        [answer] = await r.ask("another")
        assert "resets at 00:00 Europe/Berlin (in 10 min)" in answer
        clock.advance(minutes=9)  # 23:59 Berlin: still the same day
        [answer] = await r.ask("now?")
        assert SPENT in answer and len(api.requests) == 1
        clock.advance(minutes=2)  # 00:01 Berlin, 23:01 UTC: a new day for the owner
        api.reply_text("good morning", usage=(10, 2))
        assert await r.ask("and now?") == ["good morning"]
        assert len(api.requests) == 2
        # Yesterday's "spent" alert no longer holds: it resolved itself (issue 40 item 6).
        [told] = [a for a in await r.budget_alerts() if a["title"] == SPENT_TITLE]
        assert told["status"] == "resolved"


async def test_zero_means_no_cap(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock, budget=0) as r:
        api.reply_text("big", usage=(5_000_000, 1_000_000))
        api.reply_text("still here", usage=(1, 1))
        assert await r.ask("one") == ["big"]
        assert await r.ask("two") == ["still here"]
        assert await r.budget_alerts() == []
        assert (await r.app.deps.budget.view()).used == 6_000_002


async def _drop(app_db: AppDb, db_name: str) -> None:
    await app_db.client.drop_database(db_name)


# --- prices -----------------------------------------------------------------------


def test_prices_for_listed_models_snapshots_and_unknown_ones() -> None:
    table = PriceTable()
    assert table.price_of("gpt-4.1-mini") == (table.prices["gpt-4.1-mini"], False)
    assert table.price_of("gpt-4o-2024-08-06")[0] == table.prices["gpt-4o"]
    assert table.price_of("gpt-4o-mini")[0] == table.prices["gpt-4o-mini"]
    assert table.price_of("models/gemini-2.0-flash-001")[0] == table.prices["gemini-2.0-flash"]
    assert table.price_of("gemini-2.5-flash-lite")[0] == table.prices["gemini-2.5-flash-lite"]
    assert table.price_of("llama3.1:8b") == (DEFAULT_PRICE, True)
    cost = table.cost("gpt-4.1-mini", 1_000_000, 100_000)  # 0.40 + 0.16
    assert round(cost.usd, 6) == 0.56 and not cost.estimated
    assert table.cost("my-local", 1000, 0).estimated


def test_input_read_from_the_prompt_cache_costs_its_cached_price() -> None:
    """From the second request of a conversation on, most input is cached: priced as
    input, a month's spend would read two to three times what the provider bills."""
    table = PriceTable()
    cost = table.cost("gpt-4.1-mini", 1_000_000, 0, 800_000)  # 0.2 x 0.40 + 0.8 x 0.10
    assert round(cost.usd, 6) == 0.16
    assert round(table.cost("gpt-4.1-mini", 1000, 0, 5000).usd, 9) == 0.0001  # all cached
    assert table.cost("llama3.1:8b", 1_000_000, 0, 1_000_000).usd == 2.0  # no discount known
    counts = [DayUsage(date(2026, 11, 27), "chat", 1_000_000, 100_000, 3, "gpt-4.1-mini", 900_000)]
    assert round(table.total(counts).usd, 6) == round(0.04 + 0.09 + 0.16, 6)
    cheaper = check_price("m", {"input": 1, "output": 2, "cached": 5})
    assert cheaper.cached_input == 1.0  # never above the uncached price


def test_usd_is_shown_small_sums_included() -> None:
    assert [usd(x) for x in (0, 0.00004, 0.0012, 0.56, 1234.5)] == [
        "$0.00",
        "<$0.0001",
        "$0.0012",
        "$0.5600",
        "$1,234.50",
    ]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"input": "2", "output": 8}, "input price of 'm' must be a number"),
        ({"input": 2}, "output price of 'm' must be a number, not None"),
        ({"input": -1, "output": 8}, "input price of 'm' is -1: give USD per million"),
        ({"input": 2, "output": 80_000}, "output price of 'm' is 80000"),
        ({"input": True, "output": 8}, "must be a number, not True"),
        ({"input": float("nan"), "output": 8}, "must be a number"),
        ([2, 8], "price of 'm' must be"),
        ({"input": 1, "output": 2, "cached": "0.1"}, "cached price of 'm' must be a number"),
        ({"input": 1, "output": 2, "cached": -1}, "cached price of 'm' is -1"),
    ],
)
def test_a_bad_price_is_refused_with_its_reason(value: object, words: str) -> None:
    with pytest.raises(PriceError, match=words.replace("(", r"\(")):
        check_price("m", value)


async def test_overrides_in_the_settings_document(db: Any) -> None:
    with pytest.raises(PriceError, match="model name '' is empty"):
        await save_prices(db, {"": {"input": 1, "output": 1}})
    with pytest.raises(PriceError, match="output price of 'x'"):
        await save_prices(db, {"ok": {"input": 1, "output": 1}, "x": {"input": 1}})
    assert await db["settings"].find_one({"_id": "model_prices"}) is None  # nothing stored
    table = await save_prices(
        db, {"My-Local": {"input": 0.5, "output": 1.5}}, default={"input": 1, "output": 3}
    )
    assert table.price_of("my-local")[1] is False and table.cost("my-local", 2_000_000, 0).usd == 1
    assert table.price_of("other") == (type(DEFAULT_PRICE)(1.0, 3.0), True)
    # A bad entry written by hand is skipped; the rest applies.
    await db["settings"].update_one(
        {"_id": "model_prices"},
        {"$push": {"models": {"model": "broken", "input": "x", "output": 1}}},
    )
    table = await load_prices(db)
    assert "broken" not in table.prices and "my-local" in table.prices


async def test_a_cron_run_that_crosses_the_cap_stops_and_is_recorded_skipped(
    app_db: AppDb, tmp_path: Path, api: FakeOpenAI, clock: FakeClock
) -> None:
    async with rig(app_db, tmp_path, api, clock, budget=30) as r:
        jobs = parts_of(r.app).jobs
        await jobs.create(
            name="Digest",
            instruction="Summarise my settings",
            cron_expression="30 15 * * *",
            timezone="Europe/Berlin",
        )
        tool_round(api, "manage_settings", {"action": "get"}, usage=(20, 15))  # 35 of 30
        api.reply_text("never asked for", usage=(1, 1))
        clock.set(NOW.replace(minute=30, second=1))
        await parts_of(r.app).engine.run_due()
        await r.app.pipeline.join()
        [run] = await r.app.deps.db["runs"].find({"kind": "cron"}).to_list()
        assert (run["status"], run["reason"]) == ("skipped", "budget_spent")
        assert run["error"].startswith("stopped before finishing: daily token budget spent")
        assert len(api.requests) == 1  # its round's tool ran; no second call
        texts = r.chat.texts()
        assert len([t for t in texts if SPENT_TITLE in t]) == 1
        assert not [t for t in texts if "Digest" in t]  # no failure notice, no result
