"""An ``alerts`` document as a typed value: ``Alert``, read in one place (``Alert.from_doc``)
and written from it (``Alert.to_doc``), with its history steps and deliveries.

What is stored does not change with this type: the field names and shapes are the ones
the router has always written, and a document from an older version loads (a field it
lacks takes its default). A document that cannot be read as an alert (no code, an
unknown severity, a date that is not a date) raises ``AlertRecordError`` naming the
field, and the store logs and skips it: one damaged alert never stops the list, the
dashboard or the escalation loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, TypedDict, TypeVar, cast

from storage.ejson import aware
from storage.outside import Outside

Doc = dict[str, Any]
T = TypeVar("T", bound=str)
Severity = Literal["info", "warning", "critical"]
Status = Literal["open", "acknowledged", "snoozed", "muted", "resolved"]
Action = Literal["deliver", "sms", "wake", "unmute"]
TextField = Literal["title", "body", "reason", "source"]
"""The fields that may hold outside words (``outside`` names which do)."""

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
STATUSES: tuple[Status, ...] = ("open", "acknowledged", "snoozed", "muted", "resolved")
UNRESOLVED: tuple[Status, ...] = ("open", "acknowledged", "snoozed", "muted")
ACTIONS: tuple[Action, ...] = ("deliver", "sms", "wake", "unmute")
PUBLIC_HISTORY = 10
"""History steps in the public view (tools, the API)."""
_EMPTY: Mapping[str, str] = MappingProxyType({})


class AlertChanges(TypedDict, total=False):
    """The fields a change sets (``AlertStore.change``), by their stored names: a
    misspelt field or a wrong value fails the type check, not a reader later."""

    severity: Severity
    status: Status
    lead: str | None
    last_page: str | None
    held: bool
    seq: int
    sms_rounds: int
    next_action: Action | None
    next_escalation_at: datetime | None
    updated_at: datetime
    last_sent_at: datetime
    delivered_at: datetime
    snoozed_until: datetime
    muted_until: datetime
    status_before_mute: Status
    count_at_mute: int
    acknowledged_at: datetime
    acknowledged_by: str
    resolved_at: datetime
    resolved_by: str
    note: str
    call_at: datetime


Removable = Literal[
    "open_key",
    "lead",
    "snoozed_until",
    "muted_until",
    "status_before_mute",
    "count_at_mute",
    "call_at",
]
"""Fields a change may remove."""
Counter = Literal["sms_rounds", "sms_sent", "calls"]
"""Fields a change may count up."""


def stop_timer() -> AlertChanges:
    """No next step: the escalation timer is off."""
    return {"next_action": None, "next_escalation_at": None}


class AlertRecordError(ValueError):
    """A stored document that cannot be read as an alert; the message names the field."""


@dataclass(frozen=True)
class Step:
    """One line of an alert's history: who did what, when."""

    at: datetime
    by: str
    action: str
    detail: str | None = None

    def to_doc(self) -> Doc:
        item: Doc = {"at": self.at, "by": self.by, "action": self.action}
        if self.detail:
            item["detail"] = self.detail
        return item


@dataclass(frozen=True)
class Delivery:
    """One chat (or the SMS page) that took a round of sending."""

    at: datetime
    channel: str

    def to_doc(self) -> Doc:
        return {"at": self.at, "channel": self.channel}


@dataclass(frozen=True)
class Alert:
    """One alert as stored in ``alerts`` (DESIGN.md, Alerts)."""

    id: Any
    """The document's ``_id`` (an ObjectId); None before it is stored."""
    code: str
    severity: Severity
    title: str
    status: Status
    created_at: datetime
    body: str = ""
    reason: str | None = None
    outside: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Which text fields are outside words, and from where (``AlertRouter.raise_alert``)."""
    source: str = "agent"
    dedupe_key: str | None = None
    open_key: str | None = None
    """The dedupe key while unresolved (a unique sparse index): repeats find it."""
    count: int = 1
    """Times it was raised (repeats under its dedupe key included)."""
    updated_at: datetime | None = None
    last_seen_at: datetime | None = None
    last_sent_at: datetime | None = None
    delivered_at: datetime | None = None
    seq: int = 0
    """Rounds of sending so far: the outbox keys ``alert:<code>:<seq>:<channel>``."""
    sms_rounds: int = 0
    """SMS pages sent in the current escalation."""
    sms_sent: int = 0
    held: bool = False
    """Waiting for the owner's quiet hours to end."""
    next_action: Action | None = None
    next_escalation_at: datetime | None = None
    lead: str | None = None
    """A line put before the next round's text ("Snooze over.")."""
    last_page: str | None = None
    """How the last page went (``budget``: the hourly SMS budget was used up)."""
    snoozed_until: datetime | None = None
    muted_until: datetime | None = None
    status_before_mute: Status | None = None
    count_at_mute: int | None = None
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    note: str | None = None
    """The owner's words on it, kept with an ack or a resolve."""
    call_at: datetime | None = None
    """When its next phone call is due (``agent.alerts.calls``)."""
    calls: int = 0
    call_events: tuple[str, ...] = ()
    history: tuple[Step, ...] = ()
    deliveries: tuple[Delivery, ...] = ()
    test: bool = False
    """A test page (``agent.alerts.page_test``): walked by its own short ladder, shown
    as a test, never escalated by the router."""

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Alert:
        """The alert ``doc`` holds; ``AlertRecordError`` when it holds none."""
        read = _Reader(doc)
        return cls(
            id=doc.get("_id"),
            code=read.code(),
            severity=read.choice("severity", SEVERITIES, "info"),
            title=read.text("title") or "",
            status=read.choice("status", STATUSES, "open"),
            created_at=read.required_time("created_at"),
            body=read.text("body") or "",
            reason=read.text("reason"),
            outside=read.sources(),
            source=read.text("source") or "agent",
            dedupe_key=read.text("dedupe_key"),
            open_key=read.text("open_key"),
            count=read.number("count", 1),
            updated_at=read.time("updated_at"),
            last_seen_at=read.time("last_seen_at"),
            last_sent_at=read.time("last_sent_at"),
            delivered_at=read.time("delivered_at"),
            seq=read.number("seq", 0),
            sms_rounds=read.number("sms_rounds", 0),
            sms_sent=read.number("sms_sent", 0),
            held=bool(doc.get("held")),
            next_action=read.optional_choice("next_action", ACTIONS),
            next_escalation_at=read.time("next_escalation_at"),
            lead=read.text("lead"),
            last_page=read.text("last_page"),
            snoozed_until=read.time("snoozed_until"),
            muted_until=read.time("muted_until"),
            status_before_mute=read.optional_choice("status_before_mute", STATUSES),
            count_at_mute=read.number("count_at_mute", 0) or None,
            acknowledged_at=read.time("acknowledged_at"),
            acknowledged_by=read.text("acknowledged_by"),
            resolved_at=read.time("resolved_at"),
            resolved_by=read.text("resolved_by"),
            note=read.text("note"),
            call_at=read.time("call_at"),
            calls=read.number("calls", 0),
            call_events=tuple(str(e) for e in read.items("call_events")),
            history=read.steps(),
            deliveries=read.deliveries(),
            test=doc.get("test") is True,
        )

    def to_doc(self) -> Doc:
        """The document of a new alert, as the router has always inserted it (``_id``
        when it has one; optional fields only when set)."""
        doc: Doc = {} if self.id is None else {"_id": self.id}
        doc |= {
            "severity": self.severity,
            "title": self.title,
            "body": self.body,
            "dedupe_key": self.dedupe_key,
            "source": self.source,
            "code": self.code,
            "status": self.status,
            "count": self.count,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "last_seen_at": self.last_seen_at,
            "last_sent_at": self.last_sent_at,
            "seq": self.seq,
            "sms_rounds": self.sms_rounds,
            "sms_sent": self.sms_sent,
            "held": self.held,
            "next_action": self.next_action,
            "next_escalation_at": self.next_escalation_at,
            "history": [step.to_doc() for step in self.history],
            "deliveries": [d.to_doc() for d in self.deliveries],
        }
        optional = {
            "reason": self.reason,
            "outside": dict(self.outside) or None,
            "open_key": self.open_key,
            "delivered_at": self.delivered_at,
            "lead": self.lead,
            "last_page": self.last_page,
            "snoozed_until": self.snoozed_until,
            "muted_until": self.muted_until,
            "status_before_mute": self.status_before_mute,
            "count_at_mute": self.count_at_mute,
            "acknowledged_at": self.acknowledged_at,
            "acknowledged_by": self.acknowledged_by,
            "resolved_at": self.resolved_at,
            "resolved_by": self.resolved_by,
            "note": self.note,
            "call_at": self.call_at,
            "calls": self.calls or None,
            "call_events": list(self.call_events) or None,
            "test": True if self.test else None,
        }
        return doc | {k: v for k, v in optional.items() if v is not None}

    def public(self) -> Doc:
        """What tools, the API and the status page show of an alert (no internals): the
        fields ``GET /api/status`` and ``POST /api/alerts`` have always answered."""
        fields: Doc = {
            "code": self.code,
            "severity": self.severity,
            "title": self.title,
            "body": self.body,
            "reason": self.reason,
            "outside": dict(self.outside) or None,
            "status": self.status,
            "source": self.source,
            "dedupe_key": self.dedupe_key,
            "count": self.count,
            "created_at": self.created_at,
            "last_seen_at": self.last_seen_at,
            "last_sent_at": self.last_sent_at,
            "snoozed_until": self.snoozed_until,
            "muted_until": self.muted_until,
            "sms_sent": self.sms_sent,
            "next_escalation_at": self.next_escalation_at,
            "held": self.held,
        }
        out = {k: v for k, v in fields.items() if v is not None}
        if self.test:
            out["test"] = True
        out["history"] = [step.to_doc() for step in self.history][-PUBLIC_HISTORY:]
        return out

    @property
    def until(self) -> datetime | None:
        """When a snooze or a mute in force ends; None in any other state."""
        if self.status == "snoozed":
            return self.snoozed_until
        if self.status == "muted":
            return self.muted_until
        return None

    def text(self, name: TextField) -> str:
        """The text field ``name`` as stored."""
        if name == "title":
            return self.title
        if name == "body":
            return self.body
        if name == "reason":
            return self.reason or ""
        return self.source

    def outside_part(self, name: TextField) -> Outside | None:
        """The field ``name`` as outside text with its source, when it is some."""
        source = self.outside.get(name)
        return None if source is None else Outside(self.text(name), source)

    @property
    def own_source(self) -> str:
        """Who raised it (``cron:<job id>``, ``pulse``, ``agent``, ``monitor:<name>``)
        when Watchkeeper said it; "" when the source is a caller's words (``POST
        /api/alerts`` may say anything, ``cron:<id>`` included): job and pulse replies
        never reach through an alert that only claims to be one."""
        return "" if "source" in self.outside else self.source


class _Reader:
    """Reads one document's fields, raising ``AlertRecordError`` for a wrong one."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self._doc = doc
        self._id = doc.get("_id")

    def _bad(self, name: str, why: str) -> AlertRecordError:
        return AlertRecordError(f"alert {self._id!r}: {name} {why}")

    def code(self) -> str:
        value = self._doc.get("code")
        if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
            raise self._bad("code", f"is {value!r}, not a code")
        return str(value)

    def text(self, name: str) -> str | None:
        value = self._doc.get(name)
        if value is None or isinstance(value, str):
            return value
        raise self._bad(name, f"is a {type(value).__name__}, not text")

    def number(self, name: str, default: int) -> int:
        value = self._doc.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(name, f"is {value!r}, not a number")
        return int(value)

    def time(self, name: str) -> datetime | None:
        value = self._doc.get(name)
        if value is not None and not isinstance(value, datetime):
            raise self._bad(name, f"is {value!r}, not a date")
        return aware(value)

    def required_time(self, name: str) -> datetime:
        value = self.time(name)
        if value is None:
            raise self._bad(name, "is missing")
        return value

    def choice(self, name: str, allowed: tuple[T, ...], default: T) -> T:
        value = self._doc.get(name)
        if value is None:
            return default
        if value not in allowed:
            raise self._bad(name, f"is {value!r}, not one of {', '.join(allowed)}")
        return cast(T, value)

    def optional_choice(self, name: str, allowed: tuple[T, ...]) -> T | None:
        if self._doc.get(name) is None:
            return None
        return self.choice(name, allowed, allowed[0])

    def items(self, name: str) -> list[Any]:
        value = self._doc.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._bad(name, "is not a list")
        return value

    def sources(self) -> Mapping[str, str]:
        value = self._doc.get("outside")
        if value is None:
            return _EMPTY
        if not isinstance(value, dict):
            raise self._bad("outside", "is not a document")
        return MappingProxyType({str(k): str(v) for k, v in value.items()})

    def steps(self) -> tuple[Step, ...]:
        steps = []
        for item in self.items("history"):
            at = aware(item.get("at")) if isinstance(item, dict) else None
            if at is None:
                raise self._bad("history", f"has a step without a date: {item!r}")
            detail = item.get("detail")
            steps.append(
                Step(
                    at,
                    str(item.get("by") or ""),
                    str(item.get("action") or ""),
                    None if detail is None else str(detail),
                )
            )
        return tuple(steps)

    def deliveries(self) -> tuple[Delivery, ...]:
        found = []
        for item in self.items("deliveries"):
            at = aware(item.get("at")) if isinstance(item, dict) else None
            if at is None:
                raise self._bad("deliveries", f"has one without a date: {item!r}")
            found.append(Delivery(at, str(item.get("channel") or "")))
        return tuple(found)
