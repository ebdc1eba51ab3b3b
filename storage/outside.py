"""Outside text: words that did not come from the owner or from Watchkeeper itself.

An MCP server's result or error, a monitored site's answer, an alert posted to
``/api/alerts``: each can say anything, "ignore your instructions" included. Such text
is an ``Outside`` from the moment it enters the process, carrying where it came from,
so that whoever handles it later (the alert texts, the prompt) knows whose words they
are without having to remember which path they came by. Stored, it keeps its source
(``doc``, ``from_doc``): a later reader of an alert or a monitor's state still knows.

This module sits in the bottom layer so that every layer can use it: the scheduler
and the channels (which never import the agent) as well as the agent and storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEY = "outside"
"""The marker of a stored ``Outside``: ``{"outside": true, "text": ..., "source": ...}``."""


@dataclass(frozen=True)
class Outside:
    """``text`` that came from ``source`` ("the site https://x", "POST /api/alerts"),
    not from the owner or from Watchkeeper."""

    text: str
    source: str

    def __str__(self) -> str:
        """What a log line or a plain field shows: the text, said to be from outside."""
        return f'{self.source} said: "{self.text}"'

    def doc(self) -> dict[str, Any]:
        """How it is stored (a monitor's state, an alert's field)."""
        return {KEY: True, "text": self.text, "source": self.source}

    @classmethod
    def from_doc(cls, value: Any) -> Outside | None:
        """The ``Outside`` stored as ``value``, or None when ``value`` is not one."""
        if isinstance(value, Outside):
            return value
        if not isinstance(value, Mapping) or value.get(KEY) is not True:
            return None
        return cls(str(value.get("text") or ""), str(value.get("source") or "outside"))


def plain(value: str | Outside | None) -> str:
    """The words of ``value``, whoever said them ("" for None): for logs and for
    matching, never for a text the model or the owner reads as ours."""
    if value is None:
        return ""
    return value.text if isinstance(value, Outside) else value
