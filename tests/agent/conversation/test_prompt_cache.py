"""A request laid out for the providers' prompt caches, measured through the real SDKs.

Providers cache the longest repeated start of a request. A ten-message conversation
with the owner, one message every few clock minutes (an hour turning over on the way)
and a tool call in the middle, goes through the real app and the real OpenAI and
Gemini adapters to local fakes; from the second request on, at least 90% of each
request's tokens must repeat the previous request from its start. The request is
read as the provider lays it out: system prompt and tools first, then the messages.
What changes (the clock, the pulse's state) rides in a note after the newest
message, and the owner's words are stored as they were written.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.app.application import App
from agent.app.core import build_app
from agent.app.features.alerts import AlertingOptions, alerting
from agent.app.features.scheduling import SchedulingOptions, scheduling
from agent.conversation.history import CUT_EVERY, estimate_tokens
from agent.conversation.prompt import NOTE_HEAD
from agent.llm.base import ModelClient
from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.llm.types import user_message
from tests.agent.app.dashboard.pages_kit import ADMIN, client_of, page
from tests.agent.app.dashboard.pages_kit import NOW as DASH_NOW
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.clock import BERLIN, FakeClock
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer
from tests.scheduling_kit import parts_of
from tests.tokens import count_tokens

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

TARGET = 0.90
OWNER = 42
WORDS = [
    "hi",
    "remind me what you can do",
    "my sister Anna lives in Hamburg",
    "who are my contacts?",
    "ok, thanks",
    "what time is it where I am?",
    "I'm flying to Tokyo next week",
    "anything I should pack?",
    "and the weather there in December?",
    "good night",
]
STEPS = [3, 1, 4, 2, 7, 1, 5, 9, 2]
"""Clock minutes between the messages: every message sees another minute."""


def openai_layout(body: dict[str, Any]) -> str:
    """Chat completions as the model reads it: the tools are part of the prompt's start."""
    return json.dumps(body.get("tools", []), ensure_ascii=False) + json.dumps(
        body["messages"], ensure_ascii=False
    )


def gemini_layout(body: dict[str, Any]) -> str:
    return (
        json.dumps(body.get("systemInstruction"), ensure_ascii=False)
        + json.dumps(body.get("tools", []), ensure_ascii=False)
        + json.dumps(body["contents"], ensure_ascii=False)
    )


def repeated_share(before: str, after: str) -> float:
    """The tokens of ``after`` that repeat ``before`` from its start, as a share."""
    n = 0
    for a, b in zip(before, after, strict=False):
        if a != b:
            break
        n += 1
    return count_tokens(after[:n]) / count_tokens(after)


@contextlib.asynccontextmanager
async def owner_chat(
    app_db: AppDb, tmp_path: Path, model: ModelClient, clock: FakeClock
) -> AsyncIterator[tuple[App, RecordingChannel]]:
    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"cache_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        owner_telegram_ids=[OWNER],
        timezone="Europe/Berlin",
        admin_token=ADMIN,  # the Spend page
    )
    chat = RecordingChannel("telegram", sender=OWNER, clock=clock)
    features = [
        alerting(AlertingOptions(background=False)),
        scheduling(SchedulingOptions(timer=False)),  # the pulse's state is in the note
    ]
    async with build_app(
        settings,
        embedded=app_db.server,
        model=model,
        channels=[chat],
        clock=clock,
        features=features,
    ) as app:
        try:
            yield app, chat
        finally:
            await app.database.client.drop_database(settings.mongodb_db)


async def converse(app: App, chat: RecordingChannel, clock: FakeClock) -> None:
    for n, words in enumerate(WORDS):
        if n:
            clock.advance(timedelta(minutes=STEPS[n - 1]))
        await chat.say(words)
        await app.pipeline.join()


def shares(layouts: list[str]) -> list[float]:
    return [repeated_share(a, b) for a, b in itertools.pairwise(layouts)]


def report(name: str, figures: list[float]) -> None:
    if os.environ.get("WATCHKEEPER_CACHE_FIGURES"):
        print(f"{name}: " + " ".join(f"{f:.1%}" for f in figures))


async def test_openai_requests_repeat_their_start(
    app_db: AppDb, tmp_path: Path, openai_api: FakeOpenAI
) -> None:
    clock = FakeClock(datetime(2026, 11, 27, 13, 44, tzinfo=BERLIN))
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    openai_api.default = Answer(200, openai_api.completion("Noted."))
    for _ in range(3):
        openai_api.reply_text("Noted.")
    openai_api.reply_tool_calls(("db_query", {"operation": "find", "collection": "contacts"}))
    async with owner_chat(app_db, tmp_path, model, clock) as (app, chat):
        await converse(app, chat, clock)
        stored = await app.deps.db["messages"].find({"role": "user"}).to_list()
    await model.aclose()
    bodies = openai_api.bodies
    assert len(bodies) == len(WORDS) + 1  # one message called a tool: two requests
    figures = shares([openai_layout(b) for b in bodies])
    report("openai", figures)
    assert min(figures) >= TARGET, figures
    # The clock rides in the newest message's note, a part of its own; never stored.
    last = bodies[-1]["messages"][-1]["content"]
    assert last[0] == {"type": "text", "text": "good night"}
    assert last[1]["text"].startswith(NOTE_HEAD)
    assert "Now: Friday 27 November 2026, 14:18 (Europe/Berlin)" in last[1]["text"]
    assert "## Pulse" in last[1]["text"]
    assert "14:18" not in bodies[-1]["messages"][0]["content"]  # the system prompt
    assert [d["parts"] for d in stored] == [[{"kind": "text", "text": w}] for w in WORDS]
    names = [t["function"]["name"] for t in bodies[-1]["tools"]]
    assert names == sorted(names)


async def test_gemini_requests_repeat_their_start(
    app_db: AppDb, tmp_path: Path, gemini_api: FakeGemini
) -> None:
    clock = FakeClock(datetime(2026, 11, 27, 13, 44, tzinfo=BERLIN))
    model = GeminiModel("gm-test", "gemini-test", base_url=gemini_api.base_url)
    gemini_api.default = Answer(200, gemini_api.answer_body([{"text": "Noted."}]))
    for _ in range(3):
        gemini_api.reply_text("Noted.")
    gemini_api.reply_calls(("db_query", {"operation": "find", "collection": "contacts"}))
    async with owner_chat(app_db, tmp_path, model, clock) as (app, chat):
        await converse(app, chat, clock)
    await model.aclose()
    bodies = gemini_api.bodies
    assert len(bodies) == len(WORDS) + 1
    figures = shares([gemini_layout(b) for b in bodies])
    report("gemini", figures)
    assert min(figures) >= TARGET, figures
    last = bodies[-1]["contents"][-1]
    assert last["parts"][0] == {"text": "good night"}
    assert last["parts"][1]["text"].startswith(NOTE_HEAD)


async def test_cached_input_tokens_are_read_from_both_providers(
    openai_api: FakeOpenAI, gemini_api: FakeGemini
) -> None:
    """What each provider says it read from its cache is kept with the usage: OpenAI's
    ``usage.prompt_tokens_details.cached_tokens``, Gemini's
    ``usageMetadata.cachedContentTokenCount`` (both part of the input tokens)."""
    answer = openai_api.completion("ok", usage=(2_000, 5))
    answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 1_920, "audio_tokens": 0}
    openai_api.push(Answer(200, answer))
    body = gemini_api.answer_body([{"text": "ok"}])
    body["usageMetadata"] |= {"promptTokenCount": 2_000, "cachedContentTokenCount": 1_536}
    gemini_api.push(Answer(200, body))
    openai_api.reply_text("no cache yet")  # no details at all: nothing cached
    models: list[ModelClient] = [
        OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url),
        GeminiModel("gm-test", "gemini-test", base_url=gemini_api.base_url),
    ]
    try:
        said = [await m.request("system", [user_message("hi")], []) for m in models]
        plain = await models[0].request("system", [user_message("hi")], [])
    finally:
        for m in models:
            await m.aclose()
    assert [(r.usage.input_tokens, r.usage.cached_input_tokens) for r in said] == [
        (2_000, 1_920),
        (2_000, 1_536),
    ]
    assert plain.usage.cached_input_tokens == 0
    total = said[0].usage + said[1].usage
    assert total.cached_input_tokens == 3_456 and total.input_tokens == 4_000


async def test_a_history_past_its_budget_keeps_its_start_for_several_exchanges(
    app_db: AppDb, tmp_path: Path, openai_api: FakeOpenAI
) -> None:
    """Past ``HISTORY_TOKEN_BUDGET`` old turns go, but the cut moves a block of
    ``CUT_EVERY`` messages at a time, not with every exchange: most requests still
    repeat the previous one's start, and every one stays within the budget."""
    clock = FakeClock(datetime(2026, 11, 27, 9, 0, tzinfo=BERLIN))
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    openai_api.default = Answer(200, openai_api.completion("Noted: " + "fine words " * 20))
    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"cache_{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path,
        owner_telegram_ids=[OWNER],
        history_token_budget=1_000,
        history_recent_tokens=0,  # no summaries: the cut is what is measured
    )
    chat = RecordingChannel("telegram", sender=OWNER, clock=clock)
    async with build_app(
        settings, embedded=app_db.server, model=model, channels=[chat], clock=clock
    ) as app:
        try:
            for n in range(40):
                clock.advance(timedelta(minutes=1))
                await chat.say(f"note {n}: " + "some words about the day " * 8)
                await app.pipeline.join()
        finally:
            await app.database.client.drop_database(settings.mongodb_db)
    await model.aclose()
    bodies = openai_api.bodies
    assert len(bodies) == 40
    starts = [json.dumps(b["messages"][1]) for b in bodies[1:]]
    assert 2 <= len(set(starts)) <= 1 + 40 * 2 // CUT_EVERY, starts  # moved, in blocks
    history = [json.dumps(b["messages"][1:-1]) for b in bodies]
    assert max(estimate_tokens(h) for h in history) < 1_000 * 1.5  # JSON costs a little
    figures = shares([openai_layout(b) for b in bodies])
    report("openai, history past its budget", figures)
    assert min(figures) >= TARGET, figures


async def test_cached_input_is_counted_with_usage_and_shown_on_the_spend_page(
    app_db: AppDb, tmp_path: Path, openai_api: FakeOpenAI
) -> None:
    """An exchange whose provider reported cached input counts it in ``usage`` beside
    the input (per day, kind and model), and the Spend page's model table shows it (the
    chat's and a cron run's)."""
    clock = FakeClock(DASH_NOW)
    answer = openai_api.completion("ok", usage=(2_000, 5))
    answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 1_536}
    openai_api.push(Answer(200, answer))
    model = OpenAIModel("sk-test", "gpt-test", base_url=openai_api.base_url)
    async with owner_chat(app_db, tmp_path, model, clock) as (app, chat):
        await chat.say("hi")
        await app.pipeline.join()
        [count] = await app.deps.usage.since(DASH_NOW.date())
        # A cron run's record keeps its cached input too, and its page shows it.
        job = await parts_of(app).jobs.create(
            name="Ping", instruction="Say ping", cron_expression="*/5 * * * *",
            timezone="Europe/Berlin",
        )  # fmt: skip
        answer = openai_api.completion("ping", usage=(3_000, 7))
        answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 2_048}
        openai_api.push(Answer(200, answer))
        clock.advance(timedelta(minutes=5, seconds=1))
        await parts_of(app).engine.run_due()
        run = await app.deps.db["runs"].find_one({"job_id": job.id})
        assert run is not None
        async with client_of(app) as client:
            text = await page(client, "/spend")
            run_page = await page(client, f"/runs/{run['_id']}")
    await model.aclose()
    assert (count.model, count.input, count.cached_input) == ("gpt-fake", 2_000, 1_536)
    row = re.search(r'<tr data-model="gpt-fake">.*?</tr>', text, re.S)
    assert row is not None and '<td class="cached" data-label="Cached">3,584</td>' in row.group()
    assert run["tokens"] == {"input": 3_000, "output": 7, "cached_input": 2_048}
    assert "3,000 in (2,048 cached) · 7 out" in run_page
