"""``doctor``'s owner line and its "next:" steps, and a report not broken by log lines."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cli.command import cli_command
from agent.cli.doctor import Check, Owners, doctor, next_steps
from storage.db import open_database
from storage.repos.pairing import PairingStore
from tests.agent.cli.procs import run_env
from tests.conftest import make_settings
from tests.fakes.stand_ins import TELEGRAM_TOKEN, TWILIO_SID, stand_ins


@pytest.fixture
async def services() -> AsyncIterator[str]:
    async with stand_ins() as (base, _seen):
        yield base


def test_each_missing_part_gets_one_next_step(tmp_path: Path) -> None:
    settings = make_settings(
        data_dir=tmp_path,
        telegram_bot_token=TELEGRAM_TOKEN,
        twilio_account_sid=TWILIO_SID,
        whatsapp_enabled=True,
    )
    steps = next_steps(settings, [], Owners(loaded=True))
    assert steps == [
        "put a model key in .env: OPENAI_API_KEY=sk-... (or GEMINI_API_KEY=...), then start again",
        f"with `{cli_command()} run` up, write to your bot on Telegram, then run "
        f"`{cli_command()} pair CODE` with the code it answers",
        "set PUBLIC_BASE_URL to this server's public https URL, so Twilio's webhook "
        "(inbound SMS) is accepted",
        "link WhatsApp: run `watchkeeper whatsapp link` and scan the QR code",
    ]
    ready = make_settings(data_dir=tmp_path, openai_api_key="k", telegram_bot_token=TELEGRAM_TOKEN)
    unreachable = [Check("model", False, "openai: HTTP 401", fatal=True)]
    assert next_steps(ready.model_copy(update={"owner_telegram_ids": [7]}), [], Owners()) == []
    [step] = next_steps(ready.model_copy(update={"owner_telegram_ids": [7]}), unreachable, Owners())
    assert step.startswith("the model does not answer (openai: HTTP 401)")


async def test_doctor_names_the_pending_code_and_fails_on_a_dead_model(
    services: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    async with open_database(None, "watchkeeper", data) as db:
        offer = await PairingStore(db.db, lambda: datetime.now(UTC)).offer(
            5, "5", "Ann", handle="ann"
        )
    assert offer.pending is not None
    line = f"run `{cli_command()} pair {offer.pending.code}` to make @ann (Telegram 5) the owner"
    base = dict(
        data_dir=data,
        openai_api_key="sk-test",
        telegram_bot_token=TELEGRAM_TOKEN,
        telegram_api_base_url=services,
    )
    assert await doctor(make_settings(**base, openai_base_url=f"{services}/v1")) == 0
    out = capsys.readouterr().out
    assert f"[--  ] owner: Telegram: none yet; {line}" in out
    assert out.rstrip().endswith(f"next: {line}")

    dead = make_settings(**base, openai_base_url="http://127.0.0.1:9/v1")
    assert await doctor(dead) == 1
    out = capsys.readouterr().out
    assert "[FAIL] model: openai: unreachable" in out and "1 fatal problem(s)" in out
    assert "next: the model does not answer (openai: unreachable" in out


def test_doctor_report_is_one_block_without_log_lines(tmp_path: Path) -> None:
    env = run_env(tmp_path, 9, OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    done = subprocess.run(
        [sys.executable, "-m", "agent", "doctor"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith("settings: ok"), done.stdout  # no "database started" line
    report = lines[1:]
    assert report and all(
        text.startswith(("[", "next: ")) or text.endswith("fatal problem(s)") for text in report
    ), done.stdout
    assert report[-1].startswith("next: ")
