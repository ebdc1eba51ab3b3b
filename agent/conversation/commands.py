"""The chat commands' one-line descriptions, importable without the agent.

The Telegram channel registers them as its command menu before its first poll, long
before the agent's own modules have loaded (``agent.app.core``)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

COMMAND_HELP: Mapping[str, str] = MappingProxyType(
    {
        "/status": "what is running",
        "/alerts": "open alerts",
        "/jobs": "cron jobs and their next run",
        "/pulse": "pulse status (/pulse run runs one now)",
        "/reset": "start a new conversation",
        "/help": "what I can do",
    }
)
"""Descriptions shown by /help and registered as Telegram's command menu."""
