"""Many chats at once through the whole app, the model built from the settings as in
production (real OpenAI and Gemini SDKs against local fakes): the burst is answered
concurrently, far above the old fixed cap of 8; a rate limit halves the provider's
limit and its wait is honoured; every message is answered once; the limit grows back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent.app.application import App
from agent.app.core import build_app
from agent.llm.limiter import AdaptiveLimit
from agent.llm.resilient import ResilientModel
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.channel import RecordingChannel
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer

# google-genai subclasses aiohttp.ClientSession, which aiohttp 3.14 frowns upon.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

FIRST = 500_000


class Gate:
    """Holds the first ``size`` requests until all of them have arrived (or ``patience``
    ran out), so a burst meets the server at once however slowly this machine hands
    it over; notes each request's time past the gate, its status, and the most
    requests open at once."""

    def __init__(self, size: int, patience: float = 20.0) -> None:
        self.size = size
        self.patience = patience
        self.full = asyncio.Event()
        self.arrived = 0
        self.open = 0
        self.peak = 0
        self.seen: list[tuple[float, int]] = []

    async def through(
        self, request: web.Request, answer: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            self.arrived += 1
            if self.arrived <= self.size:
                if self.arrived == self.size:
                    self.full.set()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.patience):
                        await self.full.wait()
            at = time.monotonic()
            response = await answer(request)
            self.seen.append((at, response.status))
            return response
        finally:
            self.open -= 1


class GatedOpenAI(FakeOpenAI):
    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate

    async def answer(self, request: web.Request) -> web.StreamResponse:
        return await self.gate.through(request, super().answer)


class GatedGemini(FakeGemini):
    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate

    async def answer(self, request: web.Request) -> web.StreamResponse:
        return await self.gate.through(request, super().answer)


@contextlib.asynccontextmanager
async def burst_app(
    tmp_path: Path, app_db: AppDb, db_name: str, **settings: Any
) -> AsyncIterator[tuple[App, RecordingChannel]]:
    config = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=db_name,
        data_dir=tmp_path / "data",
        owner_telegram_ids=list(range(FIRST, FIRST + 100)),
        **settings,
    )
    chat = RecordingChannel("telegram")
    # The model from the settings.
    async with build_app(config, embedded=app_db.server, channels=[chat], features=[]) as app:
        yield app, chat


def _limit(app: App, provider: str) -> AdaptiveLimit:
    model = app.agent.model
    assert isinstance(model, ResilientModel)
    return model.limits[provider]


async def _burst(app: App, chat: RecordingChannel, chats: int, label: str) -> None:
    before = len(chat.sent)
    await asyncio.gather(*(chat.say(f"{label} {n}", sender=FIRST + n) for n in range(chats)))
    async with asyncio.timeout(30):
        await app.pipeline.join()
    replies = chat.sent[before:]
    # Every chat answered, once: nothing dropped, nothing doubled.
    assert sorted(m.chat_id for m in replies) == sorted(str(FIRST + n) for n in range(chats))


async def test_a_burst_runs_at_once_under_the_default_limit(
    tmp_path: Path, app_db: AppDb, db: Any
) -> None:
    gate = Gate(40)
    async with GatedOpenAI(gate) as api:
        api.default = Answer(200, api.completion("hello"))
        async with burst_app(
            tmp_path, app_db, db.name, openai_api_key="sk-test", openai_base_url=api.base_url
        ) as (app, chat):
            await _burst(app, chat, 40, "hi")
    # All 40 model calls were in flight together (the old fixed cap was 8: with it the
    # gate would have waited its full patience and let only 8 through at once).
    assert gate.peak == 40 and gate.full.is_set()
    assert _limit(app, "openai").limit == 100  # the default ceiling, untouched


async def test_a_rate_limit_backs_off_waits_and_grows_back(
    tmp_path: Path, app_db: AppDb, db: Any
) -> None:
    gate = Gate(16)
    async with GatedOpenAI(gate) as api:
        api.rate_limit(5, retry_after="1")
        api.default = Answer(200, api.completion("hello"), delay=0.2)
        async with burst_app(
            tmp_path,
            app_db,
            db.name,
            openai_api_key="sk-test",
            openai_base_url=api.base_url,
            max_concurrent_model_calls=16,
        ) as (app, chat):
            limit = _limit(app, "openai")
            seen: list[int] = []

            async def watch() -> None:
                while True:
                    seen.append(limit.limit)
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            await _burst(app, chat, 24, "first")
            after_first = limit.limit
            await _burst(app, chat, 24, "second")
            watcher.cancel()
    assert gate.peak == 16  # the configured ceiling, reached at once
    statuses = [status for _, status in gate.seen]
    assert statuses.count(429) == 5 and len(statuses) == 24 + 5 + 24  # each 429 retried once
    assert min(seen) == 8  # five 429s of one round: halved once
    assert 8 < after_first < 16 and limit.limit == 16  # grew back with the successes
    first_429 = min(at for at, status in gate.seen if status == 429)
    later = sorted(gate.seen)[16:]
    assert all(at - first_429 >= 0.95 for at, _ in later)  # Retry-After: 1 honoured by all


async def test_gemini_quota_errors_wait_the_retry_delay_from_the_body(
    tmp_path: Path, app_db: AppDb, db: Any
) -> None:
    gate = Gate(20)
    async with GatedGemini(gate) as api:
        api.rate_limit(3, retry_delay="1s")
        api.default = Answer(200, api.answer_body([{"text": "hello"}]))
        async with burst_app(
            tmp_path,
            app_db,
            db.name,
            gemini_api_key="AIza-test",
            gemini_base_url=api.base_url,
        ) as (app, chat):
            await _burst(app, chat, 20, "hi")
    assert gate.peak == 20 and len(gate.seen) == 20 + 3  # 20 at once; the three 429s retried
    first_429 = min(at for at, status in gate.seen if status == 429)
    retried = sorted(gate.seen)[20:]
    assert all(at - first_429 >= 0.95 for at, _ in retried)  # the body's retryDelay: 1s
    assert _limit(app, "gemini").limit < 100  # backed off; grows back as calls succeed
