"""Outside text: words that did not come from the owner or from Watchkeeper itself.

An MCP server's result or error, a monitored site's answer, an alert posted to
``/api/alerts`` can say anything, "ignore your instructions" included. Such text is an
``Outside`` from the moment it enters the process, carrying where it came from, so that
whoever handles it later (the alert texts, the prompt) knows whose words they are
without remembering which path they came by; stored, it keeps its source (``doc``,
``from_doc``). It lives in the bottom layer, so the scheduler and the channels (which
never import the agent) can make one too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OUTSIDE_KEY = "outside"
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
        return {OUTSIDE_KEY: True, "text": self.text, "source": self.source}

    @classmethod
    def from_doc(cls, value: Any) -> Outside | None:
        """The ``Outside`` stored as ``value``, or None when ``value`` is not one."""
        if isinstance(value, Outside):
            return value
        if not isinstance(value, Mapping) or value.get(OUTSIDE_KEY) is not True:
            return None
        return cls(str(value.get("text") or ""), str(value.get("source") or "outside"))


def outside_docs(change: Mapping[str, Any]) -> dict[str, Any]:
    """``change`` as MongoDB stores it: each ``Outside`` value as its ``doc``."""
    return {k: v.doc() if isinstance(v, Outside) else v for k, v in change.items()}
