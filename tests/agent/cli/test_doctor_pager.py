"""``watchkeeper doctor`` tells the truth about the pager: every part a configured pager
depends on is tried live (Twilio's account with the SID and token, the sender number
is the account's, Telegram's ``getMe``), and a configured part that does not work is
a ``[FAIL]`` with a ``next:`` line and a non-zero exit. "nothing missing" only when
nothing is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.cli.doctor import doctor
from agent.cli.run_lock import hold_run_lock
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.stand_ins import TELEGRAM_TOKEN, stand_ins
from tests.fakes.twilio_api import FakeTwilio

SID = "AC" + "1" * 32
TOKEN = "tw-right-token"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
async def twilio() -> AsyncIterator[FakeTwilio]:
    async with FakeTwilio(account_sid=SID, auth_token=TOKEN) as fake:
        yield fake


@dataclass
class Rig:
    """What every doctor run here points at: a model, and the suite's database."""

    model_url: str
    database: str


@pytest.fixture
async def api(mongo_server: str) -> AsyncIterator[Rig]:
    async with FakeOpenAI() as fake:
        yield Rig(fake.base_url, mongo_server)


async def _doctor(
    tmp_path: Path, api: Rig, twilio_url: str, capsys: pytest.CaptureFixture[str], **kw: Any
) -> tuple[int, str]:
    async with stand_ins() as (base, _seen):
        fields: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "mongodb_uri": api.database,
            "openai_api_key": "sk-test",
            "openai_base_url": api.model_url,
            "llm_provider": "openai",
            "telegram_bot_token": TELEGRAM_TOKEN,
            "telegram_api_base_url": base,
            "owner_telegram_ids": [7],
            "twilio_account_sid": SID,
            "twilio_auth_token": TOKEN,
            "twilio_from_number": "+15550001111",
            "twilio_api_base_url": twilio_url,
            "owner_phone": "+15550002222",
            "public_base_url": "https://agent.example.org",
        }
        code = await doctor(make_settings(**{**fields, **kw}))
    return code, capsys.readouterr().out


async def test_a_working_pager_is_ok_and_nothing_is_missing(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys)
    assert code == 0, out
    assert "[ok  ] sms: Twilio: reachable, account active, +15550001111 is its number" in out
    assert "[ok  ] calls: on" in out
    assert "next: nothing missing; `" in out and " run` starts everything configured" in out
    assert TOKEN not in out


async def test_nothing_missing_names_the_command_that_works_off_the_path(
    tmp_path: Path,
    api: Rig,
    twilio: FakeTwilio,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``watchkeeper`` not on ``PATH`` (installed by ``scripts/run``): the line names the
    checkout's script, as typed from the working directory, not a command that fails."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(ROOT)
    code, out = await _doctor(tmp_path, api, twilio.url, capsys)
    assert code == 0, out
    assert "next: nothing missing; `scripts/run run` starts everything configured" in out
    assert "`watchkeeper" not in out


async def test_a_wrong_auth_token_fails_with_what_to_do(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys, twilio_auth_token="tw-typo")
    assert code == 1, out
    assert "[FAIL] sms: Twilio refused TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN (HTTP 401)" in out
    assert "next: copy the Account SID and Auth Token from console.twilio.com" in out
    assert "nothing missing" not in out and "tw-typo" not in out


async def test_a_sender_the_account_does_not_own_fails(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys, twilio_from_number="+15559999999")
    assert code == 1, out
    assert "[FAIL] sms: Twilio: TWILIO_FROM_NUMBER +15559999999 is not a number of this" in out
    assert "next: set TWILIO_FROM_NUMBER to one of the account's numbers" in out


async def test_a_suspended_account_fails(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    twilio.account_status = "suspended"
    code, out = await _doctor(tmp_path, api, twilio.url, capsys)
    assert code == 1, out
    assert "[FAIL] sms: Twilio: the account is suspended" in out


async def test_twilio_out_of_reach_fails_instead_of_a_neutral_line(
    tmp_path: Path, api: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, "http://127.0.0.1:9", capsys)
    assert code == 1, out
    assert "[FAIL] sms: Twilio: unreachable" in out
    assert "next: Twilio cannot be reached from here" in out
    assert "nothing missing" not in out


async def test_twilio_set_up_in_part_fails_naming_what_is_unset(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys, twilio_from_number=None)
    assert code == 1, out
    assert "[FAIL] sms: TWILIO_FROM_NUMBER unset: no SMS can be sent" in out
    assert "next: set TWILIO_FROM_NUMBER in .env" in out


async def test_calls_wanted_without_a_public_url_fail(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys, public_base_url=None)
    assert code == 1, out
    assert "[FAIL] calls: off: PUBLIC_BASE_URL is not set" in out
    assert out.count("next: set PUBLIC_BASE_URL") == 1  # one step for one missing setting
    code, out = await _doctor(
        tmp_path, api, twilio.url, capsys, public_base_url=None, twilio_voice_calls="off"
    )
    assert "[--  ] calls: off: TWILIO_VOICE_CALLS=off" in out  # chosen: not a failure


async def test_a_refused_bot_token_fails(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys, telegram_bot_token="9:wrong")
    assert code == 1, out
    assert "[FAIL] telegram: HTTP 404" in out
    assert "next: Telegram refused TELEGRAM_BOT_TOKEN: copy it again from @BotFather" in out


async def test_whatsapp_enabled_but_not_linked_fails(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = await _doctor(tmp_path, api, twilio.url, capsys, whatsapp_enabled=True)
    assert code == 1, out
    assert "[FAIL] whatsapp: enabled but not linked" in out
    assert "next: link WhatsApp" in out


async def test_beside_a_running_agent_doctor_says_it_is_running(
    tmp_path: Path, api: Rig, twilio: FakeTwilio, capsys: pytest.CaptureFixture[str]
) -> None:
    with hold_run_lock(tmp_path / "data"):
        code, out = await _doctor(tmp_path, api, twilio.url, capsys)
    assert code == 0, out
    assert "next: nothing missing; Watchkeeper is running (pid " in out
    assert "starts everything configured" not in out
