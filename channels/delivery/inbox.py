"""The inbox rows as the pipeline reads and writes them.

The pipeline reads a burst's rows (``storage.repos.inbox.InboxRow``) back as one
``Envelope`` (the message, and what the pipeline knows about it), keys each reply in
the outbox by its row (so a message handled again after a crash produces no second
reply), and says why a message could not be stored (``storage.repos.inbox.unstorable``
tells when the row itself was refused). The rows received within a window
are read by ``storage.repos.inbox``.
"""

from __future__ import annotations

from bson import ObjectId

from channels.delivery.envelope import Envelope
from channels.delivery.text import clean_text
from channels.types import InboundMessage
from storage.repos.inbox import InboxRow

REASON_LIMIT = 300


def failure_reason(exc: BaseException) -> str:
    """A failure as the operator reads it in the inbox row (short, one line)."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return clean_text(text)[:REASON_LIMIT]


def envelope_of(rows: list[InboxRow]) -> Envelope:
    """The envelope of a burst's rows (one row: itself): the first one's identity, every
    text in order, the last one's time and name. Replayed when the leader's row counts
    an earlier attempt."""
    first, last = rows[0], rows[-1]
    meta = dict(first.meta)
    if len(rows) > 1:
        meta["message_ids"] = [r.external_id for r in rows]
    message = InboundMessage(
        channel=first.channel,
        external_id=first.external_id,
        chat_id=first.chat_id,
        sender_id=first.sender_id,
        text="\n".join(r.text for r in rows),
        received_at=last.received_at,
        sender_name=last.sender_name or first.sender_name,
        reply_to=first.reply_to,
        meta=meta,
    )
    return Envelope(
        message,
        inbox_id=str(first.id),
        replay=first.attempts > 1,
        has_media=any(r.media for r in rows),
    )


def reply_key(inbox_id: ObjectId, n: int) -> str:
    """The idempotency key of the ``n``-th reply to the inbox row ``inbox_id``."""
    return f"{inbox_id}:{n}"
