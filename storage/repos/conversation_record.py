"""A conversation and its stored messages as typed values, read once at their store
(``storage.repos.conversations``): ``Conversation`` (its id, key and running summary)
and ``StoredMessage`` (one message of its history: order, role, parts, size).

Read on every exchange, so reading stays plain: no field is validated beyond its type
(the parts are the agent's to parse, ``MessagesAdapter``). What is stored does not
change with these types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from bson import ObjectId

from storage.ejson import aware
from storage.records import BadRecord


@dataclass(frozen=True, slots=True)
class Summary:
    """A conversation's running summary of its messages up to ``through_seq``
    (``agent.conversation.summary``)."""

    text: str
    through_seq: int

    @classmethod
    def of(cls, stored: object) -> Summary | None:
        """The summary as stored (``conversations.summary``); None when there is none."""
        if not isinstance(stored, Mapping) or not stored.get("text"):
            return None
        return cls(str(stored["text"]), int(stored.get("through_seq", -1)))


@dataclass(frozen=True, slots=True)
class Conversation:
    """The conversation a chat's messages go to (``ConversationRepo.active``)."""

    id: ObjectId
    key: str
    summary: Summary | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Conversation:
        conv_id = doc.get("_id")
        if not isinstance(conv_id, ObjectId):
            raise BadRecord(f"conversation _id is {conv_id!r}, not an ObjectId")
        return cls(conv_id, str(doc.get("key") or ""), Summary.of(doc.get("summary")))


class StoredMessage(NamedTuple):
    """One message of a conversation as stored: its place (``seq``), who spoke, its
    parts (provider-neutral dicts), and its size in tokens when it was stored. A named
    tuple: an exchange reads up to 200 of them, and a tuple is made five times faster
    than a frozen dataclass."""

    seq: int
    role: str
    parts: Sequence[Any]
    tokens: int = 0
    created_at: datetime | None = None

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> StoredMessage:
        parts = doc.get("parts") or ()
        return cls(
            int(doc.get("seq") or 0),
            str(doc.get("role") or ""),
            parts if isinstance(parts, list | tuple) else (),
            int(doc.get("tokens") or 0),
            aware(doc.get("created_at")),
        )
