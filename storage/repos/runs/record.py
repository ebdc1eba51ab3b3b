"""A run record (``runs``) as a typed value: ``Run``, read from a stored document once
(``Run.from_doc``), and ``Outcome``, how a try ended, which the store writes
(``storage.repos.runs.store``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal, cast, get_args

from bson import ObjectId

from storage.records import (
    BadRecord,
    Doc,
    mapping,
    maybe_text,
    moment,
    number,
    text,
    texts,
    whole,
)

log = logging.getLogger(__name__)
RunKind = Literal["cron", "pulse"]
Status = Literal["success", "failed", "timeout", "skipped"]
RunStatus = Literal["running", "success", "failed", "timeout", "skipped"]
Trigger = Literal["schedule", "manual", "command", "api"]
Reason = Literal[
    # why a run failed
    "timeout",
    "model_unavailable",
    "out_of_steps",
    "internal_error",
    "interrupted",
    # why a fire did not run
    "daily_cap",
    "idle",
    "budget_spent",
    "missed",
    "superseded",
    # why a fire failed without its work being done (or after its retries ran out)
    "database_unavailable",
]
"""Why a run did not succeed, as a fixed word: the owner's message is chosen by it."""
FAILED: frozenset[str] = frozenset({"failed", "timeout"})
PASSING: frozenset[str] = frozenset({"model_unavailable", "database_unavailable"})
"""Reasons a fire may well succeed a little later: it is tried again in its grace window."""
RETRY_LEASE = timedelta(minutes=1)
"""A claimed retry's ``retry_at`` moves this far ahead: if the process dies (or the
database drops) before the try starts, it is claimed again then."""
RESULT_LIMIT = 8_000
ERROR_LIMIT = 300
_KINDS: tuple[str, ...] = get_args(RunKind)
_STATUSES: tuple[str, ...] = get_args(RunStatus)
_TRIGGERS: tuple[str, ...] = get_args(Trigger)
_REASONS: tuple[str, ...] = get_args(Reason)


def short_error(line: str) -> str:
    words = " ".join(line.split())
    return words if len(words) <= ERROR_LIMIT else words[: ERROR_LIMIT - 1] + "…"


@dataclass(frozen=True)
class Tokens:
    input: int = 0
    output: int = 0
    cached_input: int | None = None
    """Of ``input``, what the provider read from its prompt cache (absent on skips)."""

    @property
    def total(self) -> int:
        return self.input + self.output

    def to_doc(self) -> Doc:
        doc: Doc = {"input": self.input, "output": self.output}
        if self.cached_input is not None:
            doc["cached_input"] = self.cached_input
        return doc


@dataclass(frozen=True)
class CallSummary:
    """One tool call of a run in short: its name, arguments and result in a line each."""

    name: str
    args: str = ""
    result: str = ""

    def to_doc(self) -> Doc:
        return {"name": self.name, "args": self.args, "result": self.result}


@dataclass(frozen=True)
class Delivery:
    """Where a cron run's answer (or its notice) was queued, under which key."""

    channel: str | None
    chat_id: str | None
    idempotency_key: str
    error: str | None = None
    """Why it could not be queued (an exception's class name)."""
    earlier_try: bool = False
    """Queued by an earlier try of the same run, before it was cut off."""

    def to_doc(self) -> Doc:
        doc: Doc = {"channel": self.channel, "chat_id": self.chat_id}
        doc["idempotency_key"] = self.idempotency_key
        if self.earlier_try:
            doc["earlier_try"] = True
        if self.error is not None:
            doc["error"] = self.error
        return doc


@dataclass(frozen=True)
class Holder:
    """Which process holds a ``running`` record, and until when without a renewal."""

    owner: str
    lease_until: datetime


@dataclass(frozen=True)
class Run:
    """One ``runs`` document, typed. Absent fields are None (or their default)."""

    id: ObjectId
    kind: RunKind
    job_id: str | None
    scheduled_for: datetime | None
    trigger: Trigger = "schedule"
    status: RunStatus = "running"
    name: str | None = None
    """The job's name when the run began (cron)."""
    reason: Reason | None = None
    error: str | None = None
    """Detail in words, for the record and the model; never matched on."""
    result: str = ""
    attempts: int = 1
    """Tries so far, this one included (0: a fire lost before any try)."""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_ms: float | None = None
    retried_at: datetime | None = None
    retry_at: datetime | None = None
    """When the next try may start (a passing failure inside the grace window)."""
    retry_until: datetime | None = None
    """The end of the fire's grace window: no try starts after it."""
    retry_note: str | None = None
    owner: str | None = None
    """The holder of a ``running`` record (``scheduler.fires.leases``)."""
    lease_until: datetime | None = None
    reclaimed_by: str | None = None
    gave_up: bool = False
    resumed: bool = False
    """Tried once more after an interruption (at most once per record)."""
    reclaimed: bool = False
    """Taken for dead by another process before its holder closed it (in memory)."""
    unsaved: bool = False
    """Its outcome waits in memory for the database (``RunRecorder.flush``)."""
    alert_pending: bool = False
    """A missed fire whose alert may not have gone out yet."""
    tool_calls: tuple[str, ...] = ()
    tokens: Tokens | None = None
    calls: tuple[CallSummary, ...] | None = None
    """Each tool call in short (None: an older record, with names only)."""
    delivery: Delivery | None = None
    context: Mapping[str, int] | None = None
    """What a pulse was given to look at (counts of news, by kind)."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Run:
        kind = doc.get("kind")
        if kind not in _KINDS:
            raise BadRecord(f"kind is {kind!r}, not one of {', '.join(_KINDS)}")
        run_id = doc.get("_id")
        if not isinstance(run_id, ObjectId):
            raise BadRecord(f"_id is {run_id!r}, not an ObjectId")
        status = doc.get("status") or "running"
        if status not in _STATUSES:
            raise BadRecord(f"status is {status!r}")
        trigger = doc.get("trigger") or "schedule"
        reason = doc.get("reason")
        job_id = doc.get("job_id")
        return cls(
            id=run_id,
            kind=cast(RunKind, kind),
            job_id=None if job_id is None else str(job_id),
            scheduled_for=moment(doc, "scheduled_for"),
            trigger=cast(Trigger, trigger) if trigger in _TRIGGERS else "schedule",
            status=cast(RunStatus, status),
            name=maybe_text(doc, "name"),
            reason=cast(Reason, reason) if reason in _REASONS else None,
            error=None if doc.get("error") is None else str(doc["error"]),
            result=text(doc, "result"),
            attempts=whole(doc, "attempts", 1),
            started_at=moment(doc, "started_at"),
            ended_at=moment(doc, "ended_at"),
            duration_ms=number(doc, "duration_ms"),
            retried_at=moment(doc, "retried_at"),
            retry_at=moment(doc, "retry_at"),
            retry_until=moment(doc, "retry_until"),
            retry_note=maybe_text(doc, "retry_note"),
            owner=maybe_text(doc, "owner"),
            lease_until=moment(doc, "lease_until"),
            reclaimed_by=maybe_text(doc, "reclaimed_by"),
            gave_up=bool(doc.get("gave_up")),
            resumed=bool(doc.get("resumed")),
            unsaved=bool(doc.get("unsaved")),
            alert_pending=bool(doc.get("alert_pending")),
            tool_calls=texts(doc, "tool_calls"),
            tokens=_tokens(mapping(doc, "tokens")),
            calls=_calls(doc.get("calls")),
            delivery=_delivery(mapping(doc, "delivery")),
            context=_counts(mapping(doc, "context")),
        )

    @classmethod
    def first_try(
        cls,
        kind: RunKind,
        job_id: str | None,
        scheduled_for: datetime,
        now: datetime,
        *,
        trigger: Trigger = "schedule",
        name: str | None = None,
        context: Mapping[str, int] | None = None,
        retry_until: datetime | None = None,
        holder: Holder | None = None,
    ) -> Run:
        """A fire's record as its first try begins: ``running``, held by ``holder``
        (stored by ``RunStore.open``)."""
        return cls(
            id=ObjectId(),
            kind=kind,
            job_id=job_id,
            scheduled_for=scheduled_for,
            trigger=trigger,
            name=name,
            context=dict(context) if context is not None else None,
            started_at=now,
            retry_until=retry_until,
            owner=holder.owner if holder is not None else None,
            lease_until=holder.lease_until if holder is not None else None,
        )

    @classmethod
    def skipped(
        cls,
        kind: RunKind,
        job_id: str | None,
        scheduled_for: datetime,
        now: datetime,
        detail: str,
        trigger: Trigger = "schedule",
        why: Reason = "missed",
        *,
        name: str | None = None,
        alert_pending: bool = False,
    ) -> Run:
        """A fire that did not run (missed, superseded, idle...), finished at ``now``."""
        return cls(
            id=ObjectId(),
            kind=kind,
            job_id=job_id,
            scheduled_for=scheduled_for,
            trigger=trigger,
            status="skipped",
            name=name,
            reason=why,
            error=detail,
            started_at=now,
            ended_at=now,
            duration_ms=0.0,
            tokens=Tokens(),
            alert_pending=alert_pending,
        )

    @classmethod
    def lost(
        cls,
        kind: RunKind,
        job_id: str | None,
        scheduled_for: datetime,
        now: datetime,
        detail: str,
        *,
        name: str | None = None,
    ) -> Run:
        """A fire that never ran because the database could not be reached in its window."""
        skipped = cls.skipped(kind, job_id, scheduled_for, now, detail, name=name)
        return replace(
            skipped, status="failed", reason="database_unavailable", attempts=0, gave_up=True
        )

    @property
    def final(self) -> bool:
        """No try left: finished and written, no retry pending."""
        return (
            self.status != "running"
            and self.retry_at is None
            and not self.unsaved
            and not self.reclaimed
        )

    @property
    def began(self) -> datetime | None:
        """When the current try began."""
        moments = [m for m in (self.started_at, self.retried_at) if m is not None]
        return max(moments, default=None)

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def to_doc(self) -> Doc:
        """The stored shape: the fields set, under their stored names."""
        doc: Doc = {"_id": self.id, "kind": self.kind, "job_id": self.job_id}
        doc |= {"scheduled_for": self.scheduled_for, "trigger": self.trigger}
        doc |= {"status": self.status, "started_at": self.started_at}
        ended = self.ended_at is not None
        if self.name is not None:
            doc["name"] = self.name
        if ended:
            doc |= {"ended_at": self.ended_at, "duration_ms": self.duration_ms}
            doc |= {"tool_calls": list(self.tool_calls)}
        if self.tokens is not None:
            doc["tokens"] = self.tokens.to_doc()
        if ended:
            doc |= {"result": self.result, "error": self.error, "reason": self.reason}
        optional: Doc = {
            "attempts": self.attempts,
            "retried_at": self.retried_at,
            "retry_at": self.retry_at,
            "retry_until": self.retry_until,
            "retry_note": self.retry_note,
            "owner": self.owner,
            "lease_until": self.lease_until,
            "reclaimed_by": self.reclaimed_by,
            "calls": None if self.calls is None else [call.to_doc() for call in self.calls],
            "delivery": None if self.delivery is None else self.delivery.to_doc(),
            "context": None if self.context is None else dict(self.context),
        }
        doc |= {key: value for key, value in optional.items() if value is not None}
        flags = ("gave_up", "resumed", "unsaved", "alert_pending", "reclaimed")
        doc |= {flag: True for flag in flags if getattr(self, flag)}
        return doc

    def to_json(self) -> Doc:
        """The record for ``/api/*`` and the tools: stored names, ``id``, ISO times."""
        return {
            ("id" if key == "_id" else key): _json(value) for key, value in self.to_doc().items()
        }


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json(item) for item in value]
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _tokens(doc: Mapping[str, Any] | None) -> Tokens | None:
    if doc is None:
        return None
    cached = doc.get("cached_input")
    return Tokens(
        whole(doc, "input"), whole(doc, "output"), None if cached is None else int(cached)
    )


def _calls(value: Any) -> tuple[CallSummary, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(
        CallSummary(
            str(call.get("name", "")), str(call.get("args", "")), str(call.get("result", ""))
        )
        for call in value
        if isinstance(call, Mapping)
    )


def _delivery(doc: Mapping[str, Any] | None) -> Delivery | None:
    if doc is None:
        return None
    chat = doc.get("chat_id")
    return Delivery(
        channel=maybe_text(doc, "channel"),
        chat_id=None if chat is None else str(chat),
        idempotency_key=text(doc, "idempotency_key"),
        error=maybe_text(doc, "error"),
        earlier_try=bool(doc.get("earlier_try")),
    )


def _counts(doc: Mapping[str, Any] | None) -> Mapping[str, int] | None:
    if doc is None:
        return None
    return {str(key): whole(doc, key) for key in doc}


@dataclass
class Outcome:
    """How a try ended; the runner fills it, the store stamps times and duration."""

    status: Status
    result: str = ""
    error: str | None = None
    """Detail in words, for the record and the model; never matched on."""
    reason: Reason | None = None
    tool_calls: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, what the provider read from its prompt cache."""
    calls: list[CallSummary] | None = None
    delivery: Delivery | None = None
    nothing_to_deliver: bool = False
    """The run chose not to send (an empty answer, a spent budget): its record says
    ``delivery`` null, unlike a try that was not the one to decide."""
