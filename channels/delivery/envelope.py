"""What the pipeline hands its handler: a stored message and what it knows about it.

Its own module, without the database client, so the composition root can name it
before the database modules have loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.types import InboundMessage


@dataclass(frozen=True)
class Envelope:
    """A stored message as the pipeline hands it to its handler: the message as the
    transport gave it, and what the pipeline knows about it (the transport types carry
    transport fields only)."""

    message: InboundMessage
    inbox_id: str | None = None
    """Its ``inbox`` row (a burst's: the leader's)."""
    replay: bool = False
    """An earlier attempt at this message may have answered it."""
    has_media: bool = True
    """Whether the row (or any row of its burst) lists media. False spares the media
    look-ups; True (unknown) looks."""
