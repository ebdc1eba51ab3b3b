"""``watchkeeper doctor`` against local stand-ins of every service it checks: the
configured model is looked up in the provider's model list, and a provider that
accepts the connection and never answers does not hold the report."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.cli.doctor import doctor
from tests.conftest import make_settings
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.stand_ins import TELEGRAM_TOKEN, TWILIO_SID, stand_ins


@pytest.fixture
async def services() -> AsyncIterator[tuple[str, list[str]]]:
    async with stand_ins() as (base, seen):
        yield base, seen


async def test_doctor_reports_each_part(
    services: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, seen = services
    async with FakeOpenAI() as api:
        code, out = await _doctor(api, base, tmp_path, capsys)
    assert code == 0, out
    assert "[ok  ] database: embedded" in out
    assert "served by" not in out  # no agent runs: doctor opened the store itself
    assert "[ok  ] model: openai: reachable, gpt-4.1-mini available" in out
    assert "[--  ] fallback: gemini: HTTP 401" in out  # reported, not fatal
    assert "[ok  ] telegram: reachable" in out
    assert "[ok  ] sms: Twilio: reachable" in out
    assert api.requests[-1].headers["Authorization"] == "Bearer sk-test"
    assert [path for path in seen if path.startswith("/gemini/")] == ["/gemini/v1/models"]
    assert "tw-secret" not in out and "sk-test" not in out


async def _doctor(
    api: FakeOpenAI, base: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    settings = make_settings(
        data_dir=tmp_path / "data",
        openai_api_key="sk-test",
        openai_base_url=api.base_url,
        gemini_api_key="g-key",
        gemini_base_url=f"{base}/gemini",
        llm_provider="openai",
        llm_fallback="gemini",
        telegram_bot_token=TELEGRAM_TOKEN,
        telegram_api_base_url=base,
        owner_telegram_ids=[7],
        twilio_account_sid=TWILIO_SID,
        twilio_auth_token="tw-secret",
        twilio_from_number="+15550001111",
        twilio_api_base_url=base,
        owner_phone="+15550002222",
        public_base_url="https://agent.example.org",
    )
    code = await doctor(settings)
    return code, capsys.readouterr().out


async def test_a_model_the_provider_does_not_have_fails_naming_it_and_close_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeOpenAI() as api, FakeGemini() as gemini:
        settings = make_settings(
            data_dir=tmp_path / "data",
            openai_api_key="sk-test",
            openai_base_url=api.base_url,
            openai_model="gpt-4.1-mni",
            gemini_api_key="g-key",
            gemini_base_url=gemini.base_url,
            gemini_model="gemini-2.5-flsh",
            llm_provider="openai",
            llm_fallback="gemini",
        )
        code = await doctor(settings)
    out = capsys.readouterr().out
    assert code == 1, out
    assert (
        "[FAIL] model: openai: model 'gpt-4.1-mni' not found; close: gpt-4.1-mini, gpt-4.1" in out
    )
    # A fallback that names no model of its provider fails too: it would fail each time.
    assert (
        "[FAIL] fallback: gemini: model 'gemini-2.5-flsh' not found; close: gemini-2.5-flash" in out
    )
    assert (
        "next: set OPENAI_MODEL to a model openai has (close to 'gpt-4.1-mni': gpt-4.1-mini" in out
    )
    assert "next: set GEMINI_MODEL to a model gemini has" in out
    assert "the model does not answer" not in out  # it answered


@pytest.mark.timeout(120)
async def test_a_provider_that_never_answers_does_not_hold_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, read, never answered
        connected.set()
        await reader.read()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = make_settings(
        data_dir=tmp_path / "data",
        openai_api_key="sk-test",
        openai_base_url=f"http://127.0.0.1:{port}/v1",
        gemini_api_key="g-key",
        gemini_base_url=f"http://127.0.0.1:{port}",
        llm_provider="openai",
        llm_fallback="gemini",
    )
    try:
        async with asyncio.timeout(60):  # the report's promise
            code = await doctor(settings)
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    out = capsys.readouterr().out
    assert connected.is_set()
    assert code == 1, out
    assert "[FAIL] model: openai: no answer within 10 s" in out
    assert "[--  ] fallback: gemini: no answer within 10 s" in out
    assert "next: the model does not answer (openai: no answer within 10 s)" in out


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
