"""The HTTP server through aiohttp's test client: health and the admin API guard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.app.core import App, build_app
from agent.app.http import make_web_app
from tests.conftest import make_settings
from tests.databases import AppDb
from tests.fakes.scripted import ScriptedModel

ADMIN = "s3cret-admin-0123456789"


@pytest.fixture
async def app(app_db: AppDb, tmp_path: Path) -> AsyncIterator[App]:
    settings = make_settings(
        mongodb_uri=app_db.mongodb_uri,
        mongodb_db=f"http_{tmp_path.name[-8:]}",
        admin_token=ADMIN,
        data_dir=tmp_path,
    )
    async with build_app(
        settings, embedded=app_db.server, model=ScriptedModel(lambda r: "ok"), channels=[]
    ) as built:
        yield built


async def _client(app: App) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(make_web_app(app)))
    await client.start_server()
    return client


async def test_healthz_ok(app: App) -> None:
    client = await _client(app)
    try:
        resp = await client.get("/healthz")
        body = await resp.json()
        assert resp.status == 200 and body["status"] == "ok" and body["db"] == "ok"
    finally:
        await client.close()


async def test_healthz_503_when_database_unreachable(app: App) -> None:
    client = await _client(app)
    try:
        for state in ("unreachable", "busy"):  # see tests/storage/test_db_health.py

            async def down(seconds: float = 2.0, state: str = state) -> str:
                return state

            app.database.health = down  # type: ignore[assignment,method-assign]
            resp = await client.get("/healthz")
            assert resp.status == 503 and (await resp.json())["db"] == state
    finally:
        await client.close()


async def test_api_status_needs_the_admin_token(app: App) -> None:
    client = await _client(app)
    try:
        assert (await client.get("/api/status")).status == 401
        wrong = await client.get("/api/status", headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
        ok = await client.get("/api/status", headers={"Authorization": f"Bearer {ADMIN}"})
        body = await ok.json()
        assert ok.status == 200 and body["outbox"] == {"pending": 0, "failed": 0}
    finally:
        await client.close()


async def test_api_answers_503_without_a_configured_token(app: App) -> None:
    app.settings.admin_token = None
    client = await _client(app)
    try:
        resp = await client.get("/api/status", headers={"Authorization": "Bearer x"})
        assert resp.status == 503
    finally:
        await client.close()


async def _command(app: App, text: str) -> str:
    from datetime import UTC, datetime

    from channels.delivery.envelope import Envelope
    from channels.types import InboundMessage

    message = InboundMessage(
        channel="console",
        external_id=text,
        chat_id="owner",
        sender_id="owner",
        text=text,
        received_at=datetime.now(UTC),
    )
    replies = await app.dispatcher.handle(Envelope(message))
    return "\n".join(r.text for r in replies)


async def test_status_command_summarises_what_runs(app: App) -> None:
    text = await _command(app, "/status")
    assert text.startswith("Model: scripted")
    assert "Pulse:" in text and "Cron jobs: 0" in text and "Open alerts: 0" in text


async def test_help_lists_every_registered_command(app: App) -> None:
    text = await _command(app, "/help")
    for name in ("/status", "/alerts", "/jobs", "/pulse", "/reset", "/help"):
        assert name in text
    # A new owner also sees what to ask, not only commands.
    assert "for example:" in text and '"remind me tomorrow at 8 to call mom"' in text
    assert text.index("for example:") < text.index("/status")


async def test_each_exchange_logs_one_line_without_its_words(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="agent.conversation.dispatch")
    secret = "my bank PIN is 4321"
    answer = await _command(app, secret)
    assert answer == "ok"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("exchange:")]
    assert len(lines) == 1
    assert lines[0].startswith(f"exchange: console, {len(secret)} chars in, 2 out, tools: none")
    assert "tokens: 10 in (0 cached) + 5 out" in lines[0] and lines[0].endswith(" ms")
    assert "4321" not in caplog.text and "ok" not in lines[0].split("tools")[0]


async def test_status_says_the_zone_was_never_chosen_until_it_is(app: App) -> None:
    text = await _command(app, "/status")
    assert (
        "Timezone: UTC, never chosen: quiet hours (22:00–07:00) are UTC; tell me where you "
        "are to change it" in text
    )
    await app.deps.owner.update(timezone="Europe/Berlin")
    assert "Timezone: Europe/Berlin\n" in await _command(app, "/status") + "\n"


async def test_the_owners_chat_is_asked_to_set_the_zone_while_nobody_chose_one(
    app: App,
) -> None:
    from agent.conversation.prompt import ZONE_UNCHOSEN, build_note
    from tests.contexts import owner_ctx

    assert ZONE_UNCHOSEN in build_note(owner_ctx(app.deps))
    await app.deps.owner.update(timezone="America/New_York")
    assert ZONE_UNCHOSEN not in build_note(owner_ctx(app.deps))
    chosen = app.deps.settings.model_copy(update={"timezone": "Asia/Tokyo"})
    assert chosen.timezone_chosen and not app.deps.settings.timezone_chosen
