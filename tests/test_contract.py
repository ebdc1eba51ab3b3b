"""The public contract of DESIGN.md that outside tests rely on: tool names, argument
names and their allowed values, exactly as the model receives them."""

from __future__ import annotations

from typing import Any

import pytest

from agent.tools.alerts import MANAGE_ALERTS, RAISE_ALERT
from agent.tools.base import Tool
from agent.tools.cron import MANAGE_CRONJOB
from agent.tools.db import DB_QUERY
from agent.tools.fetch import FETCH_URL
from agent.tools.memory import FORGET_MEMORY, SAVE_MEMORY, SEARCH_MEMORY, UPDATE_DB_SCHEMA
from agent.tools.pulse import MANAGE_PULSE
from agent.tools.send import SEND_MESSAGE
from agent.tools.settings import MANAGE_SETTINGS
from agent.tools.web import WEB_SEARCH
from agent.tools.whatsapp import WHATSAPP_TOOLS

TOOLS: dict[str, Tool[Any]] = {
    t.name: t
    for t in (
        SAVE_MEMORY, SEARCH_MEMORY, FORGET_MEMORY, UPDATE_DB_SCHEMA, DB_QUERY, WEB_SEARCH,
        FETCH_URL,
        RAISE_ALERT, MANAGE_ALERTS, MANAGE_CRONJOB, MANAGE_PULSE, MANAGE_SETTINGS, SEND_MESSAGE,
        *WHATSAPP_TOOLS,
    )
}  # fmt: skip

ARGUMENTS = {
    "save_memory": {"memory", "replaces"},
    "search_memory": {"query", "limit"},
    "forget_memory": {"query", "ids", "history"},
    "update_db_schema": {"schema"},
    "db_query": {
        "operation", "collection", "filter", "data", "update", "pipeline", "sort", "limit",
        "skip", "projection", "upsert", "index",
    },
    "manage_cronjob": {
        "action", "job_id", "name", "instruction", "cron_expression", "run_at", "in_minutes",
        "timezone", "enabled", "on_failure",
    },
    "manage_pulse": {
        "action", "notes", "enabled", "active_days", "pulses_per_day", "paused_until",
    },
    "manage_settings": {
        "action", "quiet_hours", "timezone", "primary_channel", "warning_sms_after_minutes",
        "effective_at",
    },
    "raise_alert": {"severity", "title", "body", "dedupe_key"},
    "manage_alerts": {"action", "code", "duration", "note"},
    "web_search": {"query", "count"},
    "fetch_url": {"url"},
    "send_message": {"channel", "to", "text"},
    "whatsapp_read_messages": {"contact", "limit"},
    "whatsapp_send_message": {"phone", "message"},
    "whatsapp_manage_permission": {
        "action", "phone_number", "display_name", "can_read", "can_reply",
    },
    "whatsapp_list_permissions": set(),
}  # fmt: skip

CHOICES = {
    ("manage_cronjob", "action"): ["create", "list", "update", "delete", "toggle"],
    ("manage_cronjob", "on_failure"): ["warning", "critical", "none"],
    ("manage_pulse", "action"): ["get_config", "update_config", "update_notes", "run_now"],
    ("manage_settings", "action"): ["get", "update"],
    ("manage_settings", "primary_channel"): ["telegram", "whatsapp", "sms"],
    ("raise_alert", "severity"): ["info", "warning", "critical"],
    ("manage_alerts", "action"): ["list", "ack", "resolve", "snooze", "mute"],
    ("send_message", "channel"): ["telegram", "whatsapp", "sms"],
    ("whatsapp_manage_permission", "action"): ["grant", "update", "revoke", "remove"],
}


def test_every_tool_of_the_contract_exists() -> None:
    assert set(TOOLS) == set(ARGUMENTS)


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_argument_names_reach_the_model(name: str) -> None:
    assert set(TOOLS[name].spec().parameters.get("properties", {})) == ARGUMENTS[name]


@pytest.mark.parametrize(("tool", "argument"), sorted(CHOICES))
def test_allowed_values(tool: str, argument: str) -> None:
    schema = TOOLS[tool].spec().parameters["properties"][argument]
    assert schema["enum"] == CHOICES[(tool, argument)]
