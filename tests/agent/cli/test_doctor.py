"""``watchkeeper doctor`` against local stand-ins of every service it checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agent.cli.doctor import doctor
from tests.conftest import make_settings


@pytest.fixture
async def services() -> AsyncIterator[tuple[str, list[str]]]:
    seen: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        seen.append(f"{request.path} {request.headers.get('Authorization', '')}")
        return web.json_response({"ok": True, "result": {}, "data": []})

    async def refuse(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"error": "bad key"}, status=401)

    app = web.Application()
    app.router.add_get("/v1/models", ok)
    app.router.add_get("/v1beta/models", refuse)
    app.router.add_get("/bot123:abc/getMe", ok)
    app.router.add_get("/2010-04-01/Accounts/AC1.json", ok)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), seen
    finally:
        await server.close()


async def test_doctor_reports_each_part(
    services: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, seen = services
    settings = make_settings(
        data_dir=tmp_path / "data",
        openai_api_key="sk-test",
        openai_base_url=f"{base}/v1",
        gemini_api_key="g-key",
        gemini_base_url=base,
        llm_provider="openai",
        llm_fallback="gemini",
        telegram_bot_token="123:abc",
        telegram_api_base_url=base,
        owner_telegram_ids=[7],
        twilio_account_sid="AC1",
        twilio_auth_token="tw-secret",
        twilio_from_number="+15550001111",
        twilio_api_base_url=base,
        owner_phone="+15550002222",
    )
    code = await doctor(settings)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[ok  ] database: embedded" in out
    assert "[ok  ] model: openai: reachable" in out
    assert "[--  ] fallback: gemini: HTTP 401" in out  # reported, not fatal
    assert "[ok  ] telegram: reachable" in out
    assert "[ok  ] sms: Twilio: reachable" in out
    assert "Bearer sk-test" in " ".join(seen)
    assert "tw-secret" not in out and "sk-test" not in out


async def test_doctor_fails_when_the_database_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(
        data_dir=tmp_path,
        openai_api_key="k",
        openai_base_url="http://127.0.0.1:9/v1",
        mongodb_uri="mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300",
    )
    code = await doctor(settings)
    out = capsys.readouterr().out
    assert code == 1
    assert "[FAIL] database: unreachable" in out
    assert "[FAIL] model: openai: unreachable" in out  # a model that does not answer is fatal
    assert "2 fatal problem(s)" in out


def test_doctor_says_when_whatsapp_is_enabled_but_not_linked(tmp_path: Path) -> None:
    from agent.cli.doctor import check_whatsapp

    settings = make_settings(data_dir=tmp_path, whatsapp_enabled=True, owner_phone="+15550002222")
    assert (
        check_whatsapp(settings).detail == "enabled but not linked: run  watchkeeper whatsapp link"
    )
    (tmp_path / "whatsapp.sqlite3").write_bytes(b"")
    assert check_whatsapp(settings).ok
