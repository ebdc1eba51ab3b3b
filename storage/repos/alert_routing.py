"""The routing numbers tuned in the database: the ``settings`` document
``{"_id": "alert_routing"}`` (DESIGN.md, alert routing), read here into
``RoutingOverrides``.

Each field is a whole number >= 0, the durations in minutes
(``warning_sms_after_minutes``...). A bad value is logged, naming its field, and read
as absent, so the default stands (``agent.alerts.policy.RoutingPolicy``) and one typo
never stops alerts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from storage import collections as c
from storage.records import Doc

log = logging.getLogger(__name__)
ROUTING_DOC = "alert_routing"
"""The ``settings`` document of routing overrides."""


def _count(doc: Mapping[str, Any], key: str) -> int | None:
    """The whole number >= 0 stored as ``key``; None when absent or bad (logged)."""
    if key not in doc:
        return None
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        log.warning("alert_routing.%s=%r ignored: not a whole number >= 0", key, value)
        return None
    return value


def _minutes(doc: Mapping[str, Any], key: str) -> timedelta | None:
    count = _count(doc, key)
    return None if count is None else timedelta(minutes=count)


@dataclass(frozen=True)
class RoutingOverrides:
    """The routing numbers set in the database; None: not set (the default stands)."""

    warning_sms_after: timedelta | None = None
    critical_repeat_every: timedelta | None = None
    critical_max_sms: int | None = None
    sms_per_hour: int | None = None
    context_window: timedelta | None = None
    short_ack_window: timedelta | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> RoutingOverrides:
        """The overrides ``doc`` sets, each checked; a bad one is logged and left out."""
        if not doc:
            return cls()
        return cls(
            warning_sms_after=_minutes(doc, "warning_sms_after_minutes"),
            critical_repeat_every=_minutes(doc, "critical_repeat_every_minutes"),
            critical_max_sms=_count(doc, "critical_max_sms"),
            sms_per_hour=_count(doc, "sms_per_hour"),
            context_window=_minutes(doc, "context_window_minutes"),
            short_ack_window=_minutes(doc, "short_ack_window_minutes"),
        )


async def routing_overrides(db: AsyncDatabase[Doc]) -> RoutingOverrides:
    """The routing numbers set in ``settings``; none set when there is no document."""
    return RoutingOverrides.from_doc(await db[c.SETTINGS].find_one({"_id": ROUTING_DOC}))
