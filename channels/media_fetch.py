"""What a channel needs to download the media it announced: the byte cap and its
errors. Kept apart from ``channels.media`` (GridFS, the inbox), so a channel's module
loads without the database client."""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from typing import Protocol, runtime_checkable


class MediaTooLarge(Exception):
    """The download went past the byte cap (the announced size was missing or wrong)."""


class MediaRefused(Exception):
    """The channel will not fetch this (an address outside the provider's host)."""


@runtime_checkable
class MediaSource(Protocol):
    """A channel that can download the media it announced."""

    async def fetch_media(self, source: Mapping[str, str], max_bytes: int) -> bytes:
        """The file's bytes; ``MediaTooLarge`` past ``max_bytes``, ``MediaRefused`` when
        it will not try."""
        ...


async def read_capped(chunks: AsyncIterable[bytes], max_bytes: int) -> bytes:
    """Everything ``chunks`` yields, raising ``MediaTooLarge`` as soon as it passes the cap."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > max_bytes:
            raise MediaTooLarge(f"more than {max_bytes} bytes")
    return bytes(data)
