"""Settings from the environment and ``.env`` (names fixed by DESIGN.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Provider = Literal["gemini", "openai"]
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")


class ConfigError(Exception):
    """A setting is wrong; the message is one line naming the setting."""


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
    llm_fallback: Provider | None = None

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
    public_base_url: str | None = None

    whatsapp_enabled: bool = False

    brave_api_key: SecretStr | None = None
    brave_api_base_url: str = "https://api.search.brave.com"

    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=0, le=65535)
    admin_token: SecretStr | None = None

    history_token_budget: int = Field(default=12_000, ge=1_000)
    max_concurrent_model_calls: int = Field(default=8, ge=1)
    cron_timeout_seconds: float = Field(default=120.0, gt=0)
    pulse_timeout_seconds: float = Field(default=180.0, gt=0)

    embedded_db_idle_timeout_seconds: float = Field(default=300.0, gt=0)
    """How long the embedded server keeps a silent client connection (soak tests shorten it);
    our clients drop idle connections at half of it."""

    # Limits on what the model can set off (DESIGN.md, limits).
    max_sends_per_exchange: int = Field(default=5, ge=0)
    sms_per_hour: int = Field(default=10, ge=0)
    """Every SMS, whatever sent it (alerts, send_message, replies); the alert routing
    settings document may lower it for alert pages."""
    max_cron_jobs: int = Field(default=50, ge=1)
    min_cron_interval_minutes: int = Field(default=5, ge=0)
    contact_messages_per_minute: int = Field(default=10, ge=1)

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
    def whatsapp_session_path(self) -> Path:
        """The linked WhatsApp session (neonize's SQLite file) inside ``DATA_DIR``."""
        return self.data_dir / "whatsapp.sqlite3"

    @property
    def embedded_db(self) -> bool:
        return self.mongodb_uri is None


def load_settings(**overrides: object) -> Settings:
    """Build settings, turning a validation failure into one clear line per bad setting."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            name = str(err["loc"][0]).upper() if err["loc"] else "settings"
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"invalid setting {name}: {msg}")
        raise ConfigError("; ".join(lines)) from None
