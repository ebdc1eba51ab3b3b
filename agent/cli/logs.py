"""Logging set-up that keeps secrets out of every log line."""

from __future__ import annotations

import logging
import sys

from agent.config import Settings

SECRET_FIELDS = (
    "gemini_api_key",
    "openai_api_key",
    "telegram_bot_token",
    "telegram_webhook_secret",
    "twilio_auth_token",
    "brave_api_key",
    "admin_token",
)


class RedactSecrets(logging.Filter):
    """Replaces any configured secret value in a record's final text with ``***``."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if len(s) >= 6]

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        text = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        exc = record.exc_text or ""
        for secret in self._secrets:
            text = text.replace(secret, "***")
            exc = exc.replace(secret, "***")
        record.msg, record.args = text, None
        record.exc_text = exc or None
        return True


def secrets_of(settings: Settings) -> list[str]:
    values = []
    for name in SECRET_FIELDS:
        value = getattr(settings, name)
        if value is not None:
            values.append(value.get_secret_value())
    if settings.mongodb_uri and "@" in settings.mongodb_uri:
        values.append(settings.mongodb_uri.split("://", 1)[-1].split("@", 1)[0])
    return values


def setup_logging(settings: Settings, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secrets_of(settings)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpx2", "httpcore", "telegram", "apscheduler", "pymongo", "secantus"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
