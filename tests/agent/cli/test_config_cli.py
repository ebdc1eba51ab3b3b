"""Settings validation and the command line's first line of defence."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.logs import RedactSecrets
from agent.config import ConfigError, load_settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"LLM_PROVIDER": "claude"}, "LLM_PROVIDER"),
        ({"TIMEZONE": "Mars/Olympus"}, "TIMEZONE"),
        ({"MONGODB_URI": "postgres://db"}, "MONGODB_URI"),
        ({"OWNER_PHONE": "12345"}, "OWNER_PHONE"),
        ({"HTTP_PORT": "99999"}, "HTTP_PORT"),
        ({"OWNER_TELEGRAM_IDS": "12,abc"}, "OWNER_TELEGRAM_IDS"),
    ],
)
def test_bad_setting_names_the_setting(
    env: dict[str, str], name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert message.startswith(f"invalid setting {name}:")
    assert "\n" not in message


def test_defaults_and_provider_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    env_file = "OPENAI_API_KEY=sk-1\nGEMINI_BASE_URL=\nOWNER_TELEGRAM_IDS=1, 2\n"
    (tmp_path / ".env").write_text(env_file)
    settings = load_settings()
    assert settings.llm_provider == "openai"
    assert settings.gemini_base_url is None  # empty values mean unset
    assert settings.owner_telegram_ids == [1, 2]
    assert (settings.http_host, settings.http_port) == ("127.0.0.1", 8080)
    assert settings.embedded_db and settings.mongodb_db == "watchkeeper"
    monkeypatch.setenv("GEMINI_API_KEY", "g")
    assert load_settings().llm_provider == "gemini"


def test_a_local_openai_compatible_server_needs_no_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    settings = load_settings()
    assert settings.llm_provider == "openai" and settings.openai_api_key is None
    from agent.llm.factory import build_model

    assert build_model(settings).name == "openai"


def test_cli_bad_setting_exits_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIMEZONE", "LLM_"))}
    env["TIMEZONE"] = "Nowhere/City"
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "watchkeeper: invalid setting TIMEZONE: unknown IANA timezone 'Nowhere/City'"
    )


def test_doctor_with_a_bad_owner_phone_fails_with_a_next_step(tmp_path: Path) -> None:
    """A setting doctor cannot even load (``OWNER_PHONE`` not E.164) is still a ``[FAIL]``
    with a ``next:`` line in its report, not only a line on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OWNER_", "LLM_"))}
    env["OWNER_PHONE"] = "0151 1234567"
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    must = "must be an E.164 number such as +14155550100"
    assert f"[FAIL] settings: OWNER_PHONE: {must}" in proc.stdout
    assert f"next: fix OWNER_PHONE in .env (or the environment): {must}" in proc.stdout
    assert "nothing missing" not in proc.stdout


def test_doctor_reports_missing_model_and_fails(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if "KEY" not in k}
    env.update({"DATA_DIR": str(tmp_path / "data")})
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[ok  ] database: embedded" in proc.stdout
    assert "no model: set GEMINI_API_KEY or OPENAI_API_KEY" in proc.stdout
    assert "telegram: disabled" in proc.stdout


def test_secrets_are_redacted_from_logs(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.redact")
    logger.addFilter(RedactSecrets(["123456:SECRET-TOKEN"]))
    with caplog.at_level(logging.INFO):
        logger.info("calling https://api.telegram.org/bot%s/getMe", "123456:SECRET-TOKEN")
    assert "SECRET-TOKEN" not in caplog.text and "bot***/getMe" in caplog.text


def test_console_script_is_installed() -> None:
    assert shutil.which("watchkeeper") or (Path(sys.executable).parent / "watchkeeper").exists()


def test_run_without_a_model_key_stops_before_starting_anything(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if "KEY" not in k}
    env.update({"DATA_DIR": str(tmp_path / "data"), "HTTP_PORT": "0"})
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "watchkeeper: no model configured: set GEMINI_API_KEY or OPENAI_API_KEY"
    )
    assert not (tmp_path / "data").exists()  # the database was never started
