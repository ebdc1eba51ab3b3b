"""Settings that would misbehave later are refused at load time, one line each (issue #11).

URLs must be http(s) with a host, no credentials and no whitespace; the Twilio sender
an E.164 number, a short code or an alphanumeric sender ID; ``ADMIN_TOKEN`` long
enough to resist guessing; a ``.env`` that is not UTF-8 is named as such.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import URL_SETTINGS, ConfigError, Settings, ensure_data_dir, load_settings

BAD_URLS = [
    ("api.example.com/v1", "must start with http:// or https://"),
    ("ftp://files.example.com", "must start with http:// or https://"),
    ("javascript:alert(1)", "must start with http:// or https://"),
    ("https://", "must name a host"),
    ("http://:8080/v1", "must name a host"),
    ("https://user:hunter2pw@api.example.com", "must not carry credentials"),
    ("https://token@api.example.com", "must not carry credentials"),
    ("https://api.example .com", "without spaces"),
    ("https://api.example.com/v1 ", "without spaces"),
    ("https://api.example.com/\tv1", "without spaces"),
    ("https://api.example.com/\x7f", "without spaces"),
    ("http://api.example.com:99999", "is not a valid URL"),
    ("http://api.example.com:port", "is not a valid URL"),
    ("http://[::1/v1", "is not a valid URL"),
]
GOOD_URLS = [
    "http://127.0.0.1:11434/v1",
    "https://api.example.com",
    "https://wk.example.com/hooks/",
    "https://[::1]:8443/x?y=1",
    "HTTPS://API.EXAMPLE.COM",
]


def _load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> Settings:
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return load_settings()


def _error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> str:
    with pytest.raises(ConfigError) as info:
        _load(monkeypatch, tmp_path, **env)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", [n.upper() for n in URL_SETTINGS])
@pytest.mark.parametrize(("url", "why"), BAD_URLS, ids=[u for u, _ in BAD_URLS])
def test_bad_urls_are_refused_with_the_setting_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, url: str, why: str
) -> None:
    message = _error(monkeypatch, tmp_path, **{name: url})
    assert message.startswith(f"invalid setting {name}: ") and why in message
    assert "hunter2pw" not in message  # a credential is never echoed


@pytest.mark.parametrize("url", GOOD_URLS)
def test_http_urls_with_a_host_are_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str
) -> None:
    settings = _load(monkeypatch, tmp_path, **{n.upper(): url for n in URL_SETTINGS})
    assert all(getattr(settings, n) == url for n in URL_SETTINGS)


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("+14155550100", "+14155550100"),
        ("+1 (415) 555-0100", "+14155550100"),
        ("12345", "12345"),  # a short code
        ("898211", "898211"),
        ("Watchkeeper", "Watchkeeper"),  # an alphanumeric sender ID, 11 characters
        ("WK Alerts 2", "WK Alerts 2"),
    ],
)
def test_twilio_senders_that_twilio_takes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str, kept: str
) -> None:
    assert _load(monkeypatch, tmp_path, TWILIO_FROM_NUMBER=given).twilio_from_number == kept


@pytest.mark.parametrize(
    "given",
    ["14155550100", "+0123456789", "+1415", "12", "Watchkeeper1", " WK", "WK-Alerts", "+1 415 x"],
)
def test_other_twilio_senders_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str
) -> None:
    message = _error(monkeypatch, tmp_path, TWILIO_FROM_NUMBER=given)
    assert message.startswith("invalid setting TWILIO_FROM_NUMBER: must be an E.164 number")


def test_a_short_admin_token_is_refused_with_how_to_make_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    message = _error(monkeypatch, tmp_path, ADMIN_TOKEN="s3cret-admin")
    assert message.startswith("invalid setting ADMIN_TOKEN: must be at least 16 characters")
    assert 'python -c "import secrets; print(secrets.token_urlsafe(32))"' in message
    assert "s3cret-admin" not in message
    token = "0123456789abcdef"
    settings = _load(monkeypatch, tmp_path, ADMIN_TOKEN=token)
    assert settings.admin_token is not None and settings.admin_token.get_secret_value() == token


def test_an_env_file_that_is_not_utf8_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_bytes(b"OPENAI_API_KEY=sk-\xff\xfe\nTIMEZONE=UTC\n")
    message = _error(monkeypatch, tmp_path)
    assert message.startswith("cannot read .env: it is not UTF-8 (byte 0xff")
    assert "save the file as UTF-8" in message


def test_data_dir_must_be_a_writable_directory(tmp_path: Path) -> None:
    ensure_data_dir(tmp_path / "new" / "data")
    assert (tmp_path / "new" / "data").is_dir()
    assert list((tmp_path / "new" / "data").iterdir()) == []  # the write check leaves nothing
    afile = tmp_path / "afile"
    afile.write_text("x")
    for path, why in (
        (afile, "is a file, not a directory"),
        (afile / "data", "part of that path is a file"),
    ):
        with pytest.raises(ConfigError) as info:
            ensure_data_dir(path)
        message = str(info.value)
        assert message.startswith("invalid setting DATA_DIR: ") and str(path) in message
        assert why in message
