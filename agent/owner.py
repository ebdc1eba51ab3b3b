"""Where the owner is reached: one answer for cron delivery, notices, ``send_message``
and alert routing alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.config import Settings

CHAT_PREFERENCE = ("telegram", "whatsapp", "console")
"""The owner's chat channels, most preferred first."""


class HasStatus(Protocol):
    def status(self) -> Mapping[str, object]: ...


@dataclass(frozen=True)
class Target:
    """One place to reach the owner."""

    channel: str
    chat_id: str


def owner_address(settings: Settings, channel: str) -> str | None:
    """The owner's chat id on ``channel``, or None when the settings name none."""
    if channel == "telegram":
        owners = settings.telegram_owner_ids  # configured first, then paired
        return str(owners[0]) if owners else None
    if channel in ("whatsapp", "sms"):
        return settings.owner_phone
    if channel == "console":
        return "owner"
    return None


def can_page(settings: Settings, running: Mapping[str, object]) -> bool:
    """Whether an SMS page can go at all: the SMS channel runs and the owner has a number."""
    return "sms" in running and owner_address(settings, "sms") is not None


def is_up(channel: HasStatus) -> bool:
    """What a channel's ``status()`` says about being connected (unknown counts as up)."""
    try:
        return bool(channel.status().get("connected", True))
    except Exception:
        return False


def owner_chats(
    settings: Settings, running: Mapping[str, HasStatus], primary: str | None = None
) -> list[Target]:
    """The owner's chats on the running channels, in preference order; channels that
    say they are down go last (a "WhatsApp is logged out" notice must not wait in
    WhatsApp's own queue while Telegram is up).

    ``primary`` (the owner's ``primary_channel``, ``manage_settings``) goes first when
    it is running and has an owner address; ``sms`` counts as a chat only then."""
    order = list(CHAT_PREFERENCE)
    if primary:
        order = [primary, *(name for name in order if name != primary)]
    found = [
        Target(name, address)
        for name in order
        if name in running and (address := owner_address(settings, name)) is not None
    ]
    found.sort(key=lambda target: not is_up(running[target.channel]))  # stable
    return found


def owner_chat(
    settings: Settings,
    running: Mapping[str, HasStatus],
    *,
    avoid: str | None = None,
    primary: str | None = None,
) -> Target:
    """The owner's main chat: the first of ``owner_chats`` (other than ``avoid``), or
    the terminal, where a delivery is at least logged."""
    for target in owner_chats(settings, running, primary):
        if target.channel != avoid:
            return target
    return Target("console", "owner")
