"""Collection names and the model's access rules for them (DESIGN.md, Collections)."""

from __future__ import annotations

SETTINGS = "settings"
CONVERSATIONS = "conversations"
MESSAGES = "messages"
INBOX = "inbox"
OUTBOX = "outbox"
RUNS = "runs"
ALERTS = "alerts"
CRONJOBS = "cronjobs"
WHATSAPP_PERMISSIONS = "whatsapp_permissions"
LEASES = "leases"
TOOL_EFFECTS = "tool_effects"
PAIRING = "pairing"
"""Telegram pairing codes and paired owners (``storage.pairing``)."""
USAGE = "usage"
"""Model tokens per day and kind (chat, cron, pulse), for the dashboard's Spend page."""

PROTECTED: frozenset[str] = frozenset(
    {
        SETTINGS,
        CONVERSATIONS,
        MESSAGES,
        INBOX,
        OUTBOX,
        RUNS,
        ALERTS,
        CRONJOBS,
        WHATSAPP_PERMISSIONS,
        LEASES,
        TOOL_EFFECTS,
        PAIRING,
        USAGE,
    }
)
MODEL_WRITABLE: frozenset[str] = frozenset({"master", "contacts", "schedule"})
AI_PREFIX = "ai_"


def model_may_write(name: str) -> bool:
    """True when the model may write ``name`` through ``db_query``."""
    return name in MODEL_WRITABLE or (name.startswith(AI_PREFIX) and len(name) > len(AI_PREFIX))
