"""Checking what an alert is raised with, once, for every way in (tool, API, internal).

The messages name the field and the rule, so an API caller or the model can fix
the request without guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from agent.alerts.store import SEVERITIES

LIMITS: Mapping[str, int] = MappingProxyType(
    {"title": 200, "body": 4000, "dedupe_key": 200, "source": 100}
)


class AlertError(ValueError):
    """An alert that cannot be raised as given; the message says which field and why."""


def _text(name: str, value: Any, *, required: bool) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip() and not required):
        if required:
            raise AlertError(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise AlertError(f"{name} must be a string, not {type(value).__name__}")
    text: str = value.strip()
    if required and not text:
        raise AlertError(f"{name} must not be empty")
    if len(text) > LIMITS[name]:
        raise AlertError(f"{name} is {len(text)} characters; at most {LIMITS[name]}")
    return text


def validate(severity: Any, title: Any, body: Any, dedupe_key: Any, source: Any) -> dict[str, Any]:
    """Check raw input (tool, API, internal) once, here, with messages a caller can act on."""
    if severity not in SEVERITIES:
        shown = repr(severity)
        if len(shown) > 40:  # the message goes back to the caller: never echo a huge value
            shown = shown[:39] + "…"
        raise AlertError(f"severity must be one of info, warning, critical; got {shown}")
    return {
        "severity": severity,
        "title": _text("title", title, required=True),
        "body": _text("body", body, required=False) or "",
        "dedupe_key": _text("dedupe_key", dedupe_key, required=False),
        "source": _text("source", source, required=False) or "agent",
    }
