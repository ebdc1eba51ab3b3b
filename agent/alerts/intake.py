"""What an alert is raised with, checked once (``validate``) for every way in (tool,
API, internal).

The messages name the field and the rule, so an API caller or the model can fix the
request without guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from storage.outside import Outside
from storage.repos.alert_record import SEVERITIES, Severity

LIMITS: Mapping[str, int] = MappingProxyType(
    {"title": 200, "body": 4000, "dedupe_key": 200, "source": 100, "reason": 1000}
)


class AlertError(ValueError):
    """An alert that cannot be raised as given; the message says which field and why."""


@dataclass(frozen=True)
class Raising:
    """An alert's fields as checked by ``validate``: ready to store."""

    severity: Severity
    title: str
    body: str = ""
    dedupe_key: str | None = None
    source: str = "agent"
    reason: str | None = None
    outside: Mapping[str, str] = field(default_factory=dict)
    """Which of title, body, reason and source are outside words, and whose."""


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


def validate(
    severity: Any, title: Any, body: Any, dedupe_key: Any, source: Any, reason: Any = None
) -> Raising:
    """Check raw input (tool, API, internal) once, here, with messages a caller can act on.

    ``title``, ``body`` and ``reason`` may be ``Outside`` (words from outside, with their
    source): they are stored as text, and ``outside`` maps each such field to its source,
    so every later reader (the alert texts, the prompt) knows whose words they are."""
    outside: dict[str, str] = {}
    given = {"title": title, "body": body, "reason": reason, "source": source}
    for name, value in given.items():
        if isinstance(value, Outside):
            outside[name] = value.source[: LIMITS["source"]]
            given[name] = value.text
    if severity not in SEVERITIES:
        shown = repr(severity)
        if len(shown) > 40:  # the message goes back to the caller: never echo a huge value
            shown = shown[:39] + "…"
        raise AlertError(f"severity must be one of info, warning, critical; got {shown}")
    checked = Raising(
        severity=severity,
        title=_text("title", given["title"], required=True) or "",
        body=_text("body", given["body"], required=False) or "",
        dedupe_key=_text("dedupe_key", dedupe_key, required=False),
        source=_text("source", given["source"], required=False) or "agent",
        reason=_text("reason", given["reason"], required=False) or None,
    )
    said = {
        "title": checked.title,
        "body": checked.body,
        "reason": checked.reason,
        "source": checked.source,
    }
    kept = {k: v for k, v in outside.items() if said.get(k)}
    return replace(checked, outside=kept)
