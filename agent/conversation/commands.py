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

EXAMPLES: tuple[str, ...] = (
    "remind me tomorrow at 8 to call mom",
    "every weekday at 7, tell me if it will rain today",
    "remember that my NAS is at 192.168.1.20",
    "check every minute that example.com is up and text me if it is down",
    "quiet hours from 22:00 to 07:00, I'm in Europe/Berlin",
)
"""What /help suggests asking: everyday requests the tools can carry out."""
