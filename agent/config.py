"""Settings from the environment and ``.env`` (names fixed by DESIGN.md)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:
    pass

Provider = Literal["gemini", "openai"]
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")
_SHORT_CODE = re.compile(r"[0-9]{3,8}")
_ALPHA_SENDER = re.compile(r"(?=[A-Za-z0-9 ]*[A-Za-z])[A-Za-z0-9]([A-Za-z0-9 ]{0,9}[A-Za-z0-9])?")
"""Twilio's alphanumeric sender ID: at most 11 letters, digits and spaces, one letter at least."""
MIN_ADMIN_TOKEN = 16
TOKEN_HINT = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
URL_SETTINGS = (
    "openai_base_url",
    "gemini_base_url",
    "telegram_api_base_url",
    "twilio_api_base_url",
    "brave_api_base_url",
    "public_base_url",
    "telegram_webhook_url",
    "healthcheck_url",
)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (only its parents):
    the SDKs of Gemini and MCP are extras, installed when the configuration uses them."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


CHECKOUT = Path(__file__).resolve().parents[1]
"""The directory that holds ``agent/``: a checkout's root when it has ``pyproject.toml``."""


def typed_path(path: Path | str) -> str:
    """``path`` as typed from the working directory: relative below it, else absolute."""
    try:
        return str(Path(path).relative_to(Path.cwd())) or "."
    except ValueError:
        return str(path)


def install_command(extra: str) -> str:
    """The command that adds the ``extra`` (``gemini``, ``mcp``) to the interpreter running
    now. Watchkeeper is not on PyPI, so ``pip install 'watchkeeper[gemini]'`` would fail:
    from a checkout, ``.venv/bin/python -m pip install -e '.[gemini]'``."""
    python = typed_path(sys.executable)
    if (CHECKOUT / "pyproject.toml").is_file():
        return f"{python} -m pip install -e '{typed_path(CHECKOUT)}[{extra}]'"
    return f"{python} -m pip install '<your Watchkeeper checkout>[{extra}]'"


class ConfigError(Exception):
    """A setting is wrong; the message is one line naming the setting. ``problems``:
    each bad setting's name and what is wrong with it, when the settings were read."""

    def __init__(self, message: str, problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


class SdkMissing(ConfigError):
    """The configuration uses an SDK that is an extra not installed (``extra``)."""

    def __init__(self, message: str, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        env_ignore_empty=True,
        extra="ignore",
        case_sensitive=False,
    )

    llm_provider: Provider | None = None
    gemini_api_key: SecretStr | None = None
    gemini_model: str = "gemini-2.5-flash"
    gemini_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_model: str = "gpt-4.1-mini"
    openai_base_url: str | None = None
    openai_transcribe_model: str = "gpt-4o-mini-transcribe"
    """Voice notes to text for OpenAI (``/audio/transcriptions`` on the same base URL)."""
    llm_fallback: Provider | None = None
    llm_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    """How long one model request may take (raise it for a local model on a CPU)."""

    mongodb_uri: str | None = None
    mongodb_db: str = "watchkeeper"
    data_dir: Path = Path("./data")
    timezone: str = "UTC"

    owner_telegram_ids: Annotated[list[int], NoDecode] = Field(default_factory=list)
    owner_phone: str | None = None

    telegram_bot_token: SecretStr | None = None
    telegram_api_base_url: str = "https://api.telegram.org"
    telegram_webhook_url: str | None = None
    telegram_webhook_secret: SecretStr | None = None

    twilio_account_sid: str | None = None
    twilio_auth_token: SecretStr | None = None
    twilio_from_number: str | None = None
    twilio_api_base_url: str | None = None
    twilio_segments_per_second: float = Field(default=1.0, gt=0, le=1000)
    """How fast the sending number may send, in SMS segments a second: 1 for a long code
    (Twilio's limit), more for a toll-free number (3) or a short code (100)."""
    public_base_url: str | None = None
    alert_call_after_minutes: float = Field(default=5.0, ge=0)
    """A critical alert unacknowledged this long rings ``OWNER_PHONE`` (0: with the
    first SMS); calls repeat with the SMS repeats, at most 3 an hour."""
    twilio_voice_calls: Literal["on", "off"] = "on"
    """Phone calls for critical alerts, when Twilio and ``OWNER_PHONE`` are set up."""

    whatsapp_enabled: bool = False

    brave_api_key: SecretStr | None = None
    brave_api_base_url: str = "https://api.search.brave.com"

    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)
    http_read_timeout_seconds: float = Field(default=10.0, gt=0)
    """How long a client may take to send a request's headers, and then its body, on
    every route (slow senders are cut off: 408 or a closed connection)."""
    admin_token: SecretStr | None = None
    trusted_proxies: Annotated[list[IPv4Network | IPv6Network], NoDecode] = Field(
        default_factory=list
    )
    """Reverse proxies in front of the HTTP server (IPs or CIDRs, comma-separated): only a
    request from one of them has its client taken from ``X-Forwarded-For`` (wrong-token
    throttling is per client). Empty: the connecting address is the client."""

    history_token_budget: int = Field(default=12_000, ge=1_000)
    history_recent_tokens: int = Field(default=3_000, ge=0)
    """Once a chat's messages after its running summary pass this many tokens, the oldest
    are summarised into it in the background, keeping about half word for word
    (``agent.conversation.summary``); 0: no summaries, old messages are only cut."""
    memory_prompt_chars: int = Field(default=1_500, ge=0, le=20_000)
    """How much of the saved facts relevant to the newest message ride in the note after
    it (``agent.tools.memory``); ``search_memory`` finds the rest."""
    max_concurrent_model_calls: int = Field(default=100, ge=1)
    """The most calls in flight to one provider; each provider's adaptive limit starts
    here and backs off on 429/503 (``agent.llm.limiter``)."""
    daily_token_budget: int = Field(default=1_000_000, ge=0)
    """Input plus output tokens per local day of the owner (0: no cap). At 80% one info
    alert; at 100% chat answers without the model and pulse and cron runs are skipped."""
    max_output_tokens: int = Field(default=8192, ge=256, le=1_000_000)
    """The most tokens the model may write in one answer, reasoning included (every
    request asks for it): each call's cost is bounded, so the daily budget holds."""
    healthcheck_url: str | None = None
    """A dead man's switch (Healthchecks.io style): pinged while all is well, ``/fail``
    with a reason otherwise, so a dead or wedged host still alerts from outside."""
    healthcheck_interval_seconds: float = Field(default=60.0, ge=5)
    cron_timeout_seconds: float = Field(default=120.0, gt=0)
    pulse_timeout_seconds: float = Field(default=180.0, gt=0)

    embedded_db_idle_timeout_seconds: float = Field(default=300.0, gt=0)
    """How long the embedded server keeps a silent client connection (soak tests shorten it);
    our clients drop idle connections at half of it."""
    embedded_db_separate_process: bool = False
    """Run the embedded database in a process of its own, as SQLite's users run a server
    when they outgrow it: a fault or a runaway query there cannot take the agent down, and
    its heap is capped at 1 GiB; costs about 24 MiB and a process. Default: on a thread of
    the agent's process (``storage.embedded.inprocess`` says what that trades)."""

    mcp_config: Path | None = None
    """The MCP servers file (``mcpServers`` format); default ``DATA_DIR/mcp.json`` when present."""
    mcp_start_timeout_seconds: float = Field(default=20.0, gt=0)
    mcp_call_timeout_seconds: float = Field(default=60.0, gt=0)
    mcp_tool_token_budget: int = Field(default=500, ge=0)
    """MCP tools are offered directly while their specs fit (estimated tokens); beyond,
    mcp_find_tools and mcp_call. 500 keeps a "hi" with every tool under 3,000 tokens."""

    # Limits on what the model can set off (DESIGN.md, limits).
    max_sends_per_exchange: int = Field(default=5, ge=0)
    sms_per_hour: int = Field(default=10, ge=0)
    """Every SMS, whatever sent it (alerts, send_message, replies); the alert routing
    settings document may lower it for alert pages."""
    max_cron_jobs: int = Field(default=50, ge=1)
    min_cron_interval_minutes: int = Field(default=5, ge=0)
    contact_messages_per_minute: int = Field(default=10, ge=1)

    # Inbound photos and voice notes (channels.delivery.media): over a cap, no download.
    media_max_bytes: int = Field(default=20_000_000, ge=0)
    media_max_audio_seconds: int = Field(default=600, ge=0)
    media_image_max_edge: int = Field(default=1568, ge=64)
    """Photos are downscaled to this longest edge before a model sees them."""
    media_max_pixels: int = Field(default=40_000_000, ge=1)
    """A photo with more pixels than this (read from its header) is not decoded: the
    model is told it was too large. A few hundred kB can announce 100 megapixels."""

    @field_validator("twilio_voice_calls", mode="before")
    @classmethod
    def _on_off(cls, v: object) -> object:
        if isinstance(v, bool):
            return "on" if v else "off"
        if isinstance(v, str):
            word = v.strip().lower()
            return {
                "true": "on",
                "1": "on",
                "yes": "on",
                "false": "off",
                "0": "off",
                "no": "off",
            }.get(word, word)
        return v

    @field_validator("llm_provider", "llm_fallback", mode="before")
    @classmethod
    def _blank_provider(cls, v: object) -> object:
        return None if v == "" else (v.lower() if isinstance(v, str) else v)

    @field_validator("owner_telegram_ids", mode="before")
    @classmethod
    def _split_ids(cls, v: object) -> object:
        if isinstance(v, str):
            return [int(x) for x in v.replace(" ", "").split(",") if x]
        if isinstance(v, int):
            return [v]
        return v

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_networks(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        networks: list[IPv4Network | IPv6Network] = []
        for item in (x.strip() for x in v.split(",")):
            if not item:
                continue
            try:
                networks.append(ip_network(item, strict=False))
            except ValueError:
                raise ValueError(
                    f"{item[:60]!r} is not an IP address or CIDR (e.g. 10.0.0.1, 10.0.0.0/8, ::1)"
                ) from None
        return networks

    @field_validator("timezone")
    @classmethod
    def _valid_tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA timezone {v!r}") from exc
        return v

    @field_validator("mongodb_uri")
    @classmethod
    def _valid_uri(cls, v: str | None) -> str | None:
        if v is None or v.strip() == "":
            return None
        if not re.match(r"^mongodb(\+srv)?://[^/\s]+", v):
            raise ValueError("must start with mongodb:// or mongodb+srv:// and name a host")
        return v

    @field_validator("owner_phone")
    @classmethod
    def _valid_phone(cls, v: str | None) -> str | None:
        if v is None or v.strip() == "":
            return None
        compact = re.sub(r"[\s\-().]", "", v)
        if not _E164.match(compact):
            raise ValueError("must be an E.164 number such as +14155550100")
        return compact

    @field_validator(*URL_SETTINGS)
    @classmethod
    def _valid_url(cls, v: str | None) -> str | None:
        return None if v is None else check_http_url(v)

    @field_validator("twilio_from_number")
    @classmethod
    def _valid_sender(cls, v: str | None) -> str | None:
        if v is None:
            return None
        compact = re.sub(r"[\s\-().]", "", v)
        if _E164.match(compact):
            return compact
        if _SHORT_CODE.fullmatch(v) or _ALPHA_SENDER.fullmatch(v):
            return v
        raise ValueError(
            "must be an E.164 number such as +14155550100, a short code (3 to 8 digits) "
            "or an alphanumeric sender ID (at most 11 letters, digits and spaces)"
        )

    @field_validator("admin_token")
    @classmethod
    def _strong_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < MIN_ADMIN_TOKEN:
            raise ValueError(
                f"must be at least {MIN_ADMIN_TOKEN} characters; generate one with  {TOKEN_HINT}"
            )
        return v

    @model_validator(mode="after")
    def _pick_provider(self) -> Settings:
        if self.llm_provider is None:
            if self.gemini_api_key:
                self.llm_provider = "gemini"
            elif self.openai_api_key or self.openai_base_url:
                # A local OpenAI-compatible server (Ollama, vLLM) often needs no key.
                self.llm_provider = "openai"
        return self

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def timezone_chosen(self) -> bool:
        """Whether ``TIMEZONE`` was set (else the zone is UTC because nobody chose one)."""
        return "timezone" in self.model_fields_set

    @property
    def whatsapp_session_path(self) -> Path:
        """The linked WhatsApp session (neonize's SQLite file) inside ``DATA_DIR``."""
        return self.data_dir / "whatsapp.sqlite3"

    @property
    def embedded_db(self) -> bool:
        return self.mongodb_uri is None


def check_http_url(value: str) -> str:
    """``value`` if it is an http(s) URL naming a host, with no credentials and no
    whitespace; else ``ValueError`` saying what is wrong."""
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError("must be a URL without spaces or control characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("must start with http:// or https://")
    if not parts.hostname:
        raise ValueError("must name a host, such as https://example.com")
    if "@" in parts.netloc:
        raise ValueError(
            "must not carry credentials (user:password@); keys have settings of their own"
        )
    return value


def ensure_data_dir(path: Path) -> None:
    """Create ``DATA_DIR`` if it is missing and prove it writable, else ``ConfigError``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"invalid setting DATA_DIR: {path} is a file, not a directory") from None
    except NotADirectoryError:
        raise ConfigError(
            f"invalid setting DATA_DIR: cannot create {path}: part of that path is a file"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"invalid setting DATA_DIR: cannot create {path} ({exc.strerror or exc})"
        ) from None
    probe = path / f".write-check-{os.getpid()}"
    try:  # os.access says yes to root on a read-only file system; a real write does not
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"invalid setting DATA_DIR: {path} is not writable ({exc.strerror or exc})"
        ) from None


def load_settings(**overrides: object) -> Settings:
    """Build settings, turning a validation failure into one clear line per bad setting."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except UnicodeDecodeError as exc:  # the .env file is not UTF-8
        raise ConfigError(
            f"cannot read .env: it is not UTF-8 (byte 0x{exc.object[exc.start]:02x} at "
            f"{exc.start}); save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read .env: {exc.strerror or exc}") from None
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = str(err["loc"][0]).upper() if err["loc"] else "settings"
            problems.append((name, str(err["msg"]).removeprefix("Value error, ")))
        lines = [f"invalid setting {name}: {msg}" for name, msg in problems]
        raise ConfigError("; ".join(lines), tuple(problems)) from None
