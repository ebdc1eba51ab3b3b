"""Where settings come from (pydantic-settings, as ``agent.config.Settings`` configures it):
an argument wins over the environment, the environment over ``.env``, ``.env`` over the
default; names in any case; empty values count as unset; unknown names are ignored;
values are converted and validated (lists of ids, booleans, numbers, secrets). Whatever
loads the settings must keep these."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import ConfigError, Settings, load_settings


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A working directory of our own, and an environment without any setting."""
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_the_environment_wins_over_env_and_an_argument_over_both(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / ".env").write_text("TIMEZONE=Asia/Tokyo\nGEMINI_MODEL=from-file\nSMS_PER_HOUR=3\n")
    monkeypatch.setenv("TIMEZONE", "Europe/Oslo")
    settings = load_settings()
    assert settings.timezone == "Europe/Oslo"  # environment over .env
    assert settings.gemini_model == "from-file"  # .env over the default
    assert settings.sms_per_hour == 3 and settings.http_port == 8080  # converted; default
    assert load_settings(timezone="UTC").timezone == "UTC"  # an argument over both


def test_names_in_any_case_and_values_converted(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / ".env").write_text(
        "export owner_telegram_ids=' 12, 34 '\nWhatsApp_Enabled=yes\n"
        "# a comment\nHTTP_READ_TIMEOUT_SECONDS=2.5\n"
    )
    monkeypatch.setenv("openai_api_key", "sk-lower")
    settings = load_settings()
    assert settings.owner_telegram_ids == [12, 34]
    assert settings.whatsapp_enabled is True
    assert settings.http_read_timeout_seconds == 2.5
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-lower"
    assert settings.llm_provider == "openai"  # picked from the key, as before


def test_empty_values_count_as_unset_and_unknown_names_are_ignored(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (here / ".env").write_text("MONGODB_URI=\nNOT_A_SETTING=1\nHTTP_PORT\n")
    monkeypatch.setenv("TIMEZONE", "")
    monkeypatch.setenv("SOMETHING_ELSE", "x")
    settings = load_settings()
    assert settings.mongodb_uri is None and settings.embedded_db
    assert settings.timezone == "UTC" and settings.http_port == 8080
    assert not hasattr(settings, "not_a_setting")


def test_no_env_file_is_read_when_told_not_to(here: Path) -> None:
    (here / ".env").write_text("GEMINI_MODEL=from-file\n")
    assert Settings(_env_file=None).gemini_model == "gemini-2.5-flash"
    other = here / "other.env"
    other.write_text("GEMINI_MODEL=from-other\n")
    assert Settings(_env_file=other).gemini_model == "from-other"
    assert Settings(_env_file=here / "missing.env").gemini_model == "gemini-2.5-flash"


def test_a_bad_value_from_env_names_its_setting(here: Path) -> None:
    (here / ".env").write_text("HTTP_PORT=eighty\nOWNER_TELEGRAM_IDS=1,two\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "invalid setting HTTP_PORT" in message
    assert "invalid setting OWNER_TELEGRAM_IDS" in message
    assert "\n" not in message


def test_the_command_hint_names_what_works_in_this_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from agent.cli.command import cli_command

    root = Path(__file__).resolve().parents[2]
    ours = Path(sys.executable).parent
    assert (ours / "watchkeeper").exists()  # the editable install's script
    monkeypatch.setenv("PATH", str(ours))
    assert cli_command() == "watchkeeper"
    # Not on PATH (installed with scripts/run): the checkout's script, as typed from here.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(root)
    assert cli_command() == "scripts/run"
    monkeypatch.chdir(tmp_path)
    assert cli_command() == str(root / "scripts" / "run")
    # Another install's watchkeeper on PATH is not ours.
    other = tmp_path / "bin"
    other.mkdir()
    (other / "watchkeeper").write_text("#!/bin/sh\n")
    (other / "watchkeeper").chmod(0o755)
    monkeypatch.setenv("PATH", str(other))
    assert cli_command() == str(root / "scripts" / "run")


def test_inside_a_container_the_hint_is_what_the_deploy_kit_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent.cli.command import cli_command

    told = "docker compose -f deploy/docker-compose.yml exec watchkeeper watchkeeper"
    monkeypatch.setenv("WATCHKEEPER_CLI", f"  {told} ")
    assert cli_command() == told
    monkeypatch.setenv("WATCHKEEPER_CLI", "")
    assert "docker" not in cli_command()
