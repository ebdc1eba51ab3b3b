"""Where words a run wrote came from, when it had read outside text: ``Provenance``.

A job's instruction written by such a run keeps it as its ``source`` (``CronJob``), a
fact as its ``FactSource``. Stored as ``{"untrusted": [...], "approved": code}``, the
shape the job views have always shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage.records import Doc

OUTSIDE_TEXT = "outside text"
"""What was read, when a stored source does not say."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """The outside text a run had read (``untrusted``: its sources) and, when the owner
    approved what it did, their code."""

    untrusted: tuple[str, ...]
    approved: str | None = None

    def to_doc(self) -> Doc:
        """As stored and shown (``approved`` only when there is one)."""
        doc: Doc = {"untrusted": list(self.untrusted)}
        if self.approved is not None:
            doc["approved"] = self.approved
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> Provenance | None:
        """A stored source; None when there is none (the owner's own words)."""
        if not isinstance(doc, Mapping):
            return None
        read = tuple(str(u) for u in doc.get("untrusted") or ()) or (OUTSIDE_TEXT,)
        approved = doc.get("approved")
        return cls(read, str(approved) if approved is not None else None)
