"""An ``outbox`` row as a typed value: ``OutboxRow``, read once (``from_doc``) and
written from it (``to_doc``, ``outcome_doc``); its store is ``storage.repos.outbox``.

What is stored does not change with this type: the field names are the ones the outbox
(``channels.delivery.outbox``) has always written, and a row from an older version
loads (a field it lacks takes its default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from storage.records import BadRecord, Doc, mapping, maybe_text, moment, text, texts, whole


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One reply as stored in ``outbox``: where it goes, what it says, and how its
    sending went."""

    idempotency_key: str
    """Its ``_id`` too: the same message enqueued again meets it."""
    channel: str
    chat_id: str
    text: str
    reply_to: str | None = None
    buttons: tuple[tuple[str, str], ...] = ()
    """Each button's label and the data it sends back."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    status: str = "pending"
    attempts: int = 0
    created_at: datetime | None = None
    claimed_at: datetime | None = None
    next_attempt_at: datetime | None = None
    sent_at: datetime | None = None
    failed_at: datetime | None = None
    last_error: str | None = None
    external_ids: tuple[str, ...] = ()
    info: Mapping[str, Any] = field(default_factory=dict)
    """What the channel said of a sent message (an SMS's segments, say)."""

    CHAT_FIELDS: ClassVar[Mapping[str, int]] = {"_id": 0, "channel": 1, "chat_id": 1}
    """The projection ``chat_of`` reads: which chat a row is for, and nothing else."""

    @staticmethod
    def chat_of(doc: Mapping[str, Any]) -> tuple[str, str]:
        """The channel and chat id of a row read with ``CHAT_FIELDS``."""
        return text(doc, "channel"), text(doc, "chat_id")

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> OutboxRow:
        """The row ``doc`` holds; ``BadRecord`` (naming the field) if it cannot be one."""
        key = doc.get("idempotency_key", doc.get("_id"))
        if not isinstance(key, str):
            raise BadRecord(f"idempotency_key is {key!r}, not text")
        buttons = doc.get("buttons") or ()
        if not isinstance(buttons, list | tuple) or not all(
            isinstance(b, Mapping) and isinstance(b.get("label"), str) for b in buttons
        ):
            raise BadRecord("buttons is not a list of buttons")
        return cls(
            idempotency_key=key,
            channel=text(doc, "channel"),
            chat_id=text(doc, "chat_id"),
            text=text(doc, "text"),
            reply_to=maybe_text(doc, "reply_to"),
            buttons=tuple((b["label"], str(b.get("data", ""))) for b in buttons),
            meta=mapping(doc, "meta") or {},
            status=text(doc, "status", "pending"),
            attempts=whole(doc, "attempts"),
            created_at=moment(doc, "created_at"),
            claimed_at=moment(doc, "claimed_at"),
            next_attempt_at=moment(doc, "next_attempt_at"),
            sent_at=moment(doc, "sent_at"),
            failed_at=moment(doc, "failed_at"),
            last_error=maybe_text(doc, "last_error"),
            external_ids=texts(doc, "external_ids"),
            info=mapping(doc, "info") or {},
        )

    def to_doc(self) -> Doc:
        """The row as it is stored when queued (the fields a send adds are ``$set``
        by the outbox as it goes)."""
        return {
            "_id": self.idempotency_key,
            "idempotency_key": self.idempotency_key,
            "channel": self.channel,
            "chat_id": self.chat_id,
            "text": self.text,
            "reply_to": self.reply_to,
            "buttons": [{"label": label, "data": data} for label, data in self.buttons],
            "meta": self.meta,
            "status": self.status,
            "claimed_at": self.claimed_at,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "next_attempt_at": self.next_attempt_at,
        }

    def outcome_doc(self) -> Doc:
        """The fields a send's outcome sets, by the row's status: sent (when, and the
        channel's ids), due again (the error, when), or failed (the error, when)."""
        if self.status == "sent":
            return {
                "status": self.status,
                "sent_at": self.sent_at,
                # No attempt is due any more: the (status, next_attempt_at) index then
                # also finds what was sent recently (storage.repos.sent_alerts).
                "next_attempt_at": self.next_attempt_at,
                "external_ids": list(self.external_ids),
            }
        if self.status == "failed":
            return {
                "status": self.status,
                "last_error": self.last_error,
                "failed_at": self.failed_at,
            }
        return {
            "status": self.status,
            "last_error": self.last_error,
            "next_attempt_at": self.next_attempt_at,
        }
