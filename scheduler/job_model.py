"""A stored cron job as a value: recurring (a cron expression) or one-time (``run_at``).

A one-time job keeps ``next_fire_at = run_at`` while pending. Once its run is over
(success or failure, after its retries) it is kept as done: ``done_at``,
``last_status``, ``enabled`` false, no next fire, and ``prune_at`` 30 days later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast, get_args

from scheduler.cron import next_fires, validate_timezone
from storage.times import aware

Doc = dict[str, Any]
JobKind = Literal["recurring", "once"]
OnFailure = Literal["warning", "critical", "none"]
ON_FAILURE: tuple[str, ...] = get_args(OnFailure)
DONE_KEPT = timedelta(days=30)
"""How long a done one-time job stays listed before it is pruned."""


class JobError(ValueError):
    """A job request that cannot be done; the message says why (shown to the model)."""


def on_failure_of(value: str | None, default: OnFailure = "warning") -> OnFailure:
    """A failure policy, or a JobError naming the choices."""
    if value is None:
        return default
    word = str(value).strip().lower()
    if word not in ON_FAILURE:
        raise JobError(
            f"on_failure {value!r} is not known; use 'warning' (alert after two failures in "
            "a row), 'critical' (a critical alert at the first failure) or 'none' (record only)"
        )
    return cast(OnFailure, word)


@dataclass(frozen=True)
class CronJob:
    id: str
    name: str
    instruction: str
    cron_expression: str
    """Empty for a one-time job."""
    timezone: str
    enabled: bool
    origin_channel: str
    origin_chat_id: str
    created_at: datetime
    next_fire_at: datetime | None
    kind: JobKind = "recurring"
    run_at: datetime | None = None
    on_failure: OnFailure = "warning"
    done_at: datetime | None = None
    last_status: str | None = None
    updated_by: str | None = None
    """Who made the latest change when not the model or the owner's chat (``dashboard``)."""

    @property
    def once(self) -> bool:
        return self.kind == "once"

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @classmethod
    def from_doc(cls, doc: Doc) -> CronJob:
        kind: JobKind = "once" if doc.get("kind") == "once" else "recurring"
        policy = doc.get("on_failure")
        return cls(
            id=str(doc["_id"]),
            name=doc.get("name", ""),
            instruction=doc.get("instruction", ""),
            cron_expression=doc.get("cron_expression") or "",
            timezone=doc.get("timezone", "UTC"),
            enabled=bool(doc.get("enabled", True)),
            origin_channel=doc.get("origin_channel", "console"),
            origin_chat_id=str(doc.get("origin_chat_id", "owner")),
            created_at=aware(doc.get("created_at")) or datetime.min.replace(tzinfo=UTC),
            next_fire_at=aware(doc.get("next_fire_at")),
            kind=kind,
            run_at=aware(doc.get("run_at")),
            on_failure=cast(OnFailure, policy) if policy in ON_FAILURE else "warning",
            done_at=aware(doc.get("done_at")),
            last_status=doc.get("last_status"),
            updated_by=doc.get("updated_by"),
        )

    def next_fires(self, after: datetime, count: int = 3) -> list[datetime]:
        """The next ``count`` fires in the job's own timezone (a one-time job: its
        ``run_at`` while it is pending and later than ``after``)."""
        tz = validate_timezone(self.timezone)
        if self.once:
            at = self.run_at
            if at is None or self.done or at <= after or count <= 0:
                return []
            return [at.astimezone(tz)]
        return next_fires(self.cron_expression, tz, after, count)
