"""Support for the Telegram channel: blanking the bot token out of log lines, and the
doubling delays between retries."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

REDACTED_LOGGERS = ("telegram.Bot", "telegram.BaseRequest", "telegram.AiohttpRequest", "httpx")
"""Loggers that write URLs with the token in them: ``AiohttpRequest`` logs every request at
DEBUG (as httpx did at INFO) and PTB logs its base URL at DEBUG. Filters apply only to
the logger they are attached to."""


class TokenRedactor(logging.Filter):
    """Blanks the token out of log records; never fails (a filter error would break the
    HTTP call that logged)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def _clean(self, value: Any) -> Any:
        text = str(value)
        return text.replace(self._token, "<token>") if self._token in text else value

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = self._clean(record.msg)
            if isinstance(record.args, tuple):
                record.args = tuple(self._clean(a) for a in record.args)
        except Exception:
            record.msg, record.args = "(log record withheld: it may contain the token)", ()
        return True

    def attach(self) -> None:
        for name in REDACTED_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def detach(self) -> None:
        for name in REDACTED_LOGGERS:
            logging.getLogger(name).removeFilter(self)


class Backoff:
    """Doubling delays between ``low`` and ``high`` seconds, reset after a success."""

    def __init__(self, low: float, high: float) -> None:
        self._low, self._high = low, high
        self._next = low

    def reset(self) -> None:
        self._next = self._low

    async def sleep(self) -> None:
        delay, self._next = self._next, min(self._next * 2, self._high)
        await asyncio.sleep(delay)

    @property
    def upcoming(self) -> float:
        return self._next
