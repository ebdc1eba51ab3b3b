"""Reading HTTP answers with a byte cap: ``read_at_most`` for any answer the product
fetches (a body past its cap is never received), ``fetch_capped`` for a media file,
with a redirect policy.

Reading stops as soon as the body passes the cap (an announced ``Content-Length``
over it is refused before reading at all). Redirects are followed by hand so each
hop is checked: the ``Authorization`` header goes only to ``auth_origin``, and
``may_follow`` decides whether a hop is allowed (a channel refuses, say, plain HTTP
to another host).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable

import aiohttp
from yarl import URL

from channels.types import MediaRefused, MediaTooLarge

MAX_REDIRECTS = 5
TIMEOUT = aiohttp.ClientTimeout(total=120, connect=10, sock_read=30)
CHUNK = 64 * 1024
Hop = Callable[[URL, URL], bool]
"""``(from, to)``: may a redirect from one URL to the other be followed?"""


def origin(url: URL) -> tuple[str, str | None, int | None]:
    return (url.scheme, url.host, url.port)


async def read_capped(chunks: AsyncIterable[bytes], max_bytes: int) -> bytes:
    """Everything ``chunks`` yields, raising ``MediaTooLarge`` as soon as it passes the cap."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > max_bytes:
            raise MediaTooLarge(f"more than {max_bytes} bytes")
    return bytes(data)


async def read_at_most(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``response``'s body, and whether that was all of it.
    Past the limit the connection is closed: the rest is never received, whatever the
    sender has (an endless or gigabyte answer costs ``limit`` bytes)."""
    body = bytearray()
    while len(body) <= limit:
        chunk = await response.content.read(min(CHUNK, limit + 1 - len(body)))
        if not chunk:
            return bytes(body), True
        body += chunk
    response.close()
    return bytes(body[:limit]), False


async def fetch_capped(
    url: str,
    max_bytes: int,
    *,
    authorization: str | None = None,
    auth_origin: str | None = None,
    may_follow: Hop | None = None,
) -> bytes:
    """The body at ``url``; ``MediaTooLarge`` past ``max_bytes``; ``MediaRefused`` for a
    redirect ``may_follow`` does not allow (none is followed without it);
    ``aiohttp.ClientError`` for transport failures and error statuses."""
    current = URL(url)
    trusted = origin(URL(auth_origin)) if auth_origin is not None else None
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for _hop in range(MAX_REDIRECTS + 1):
            trusted_hop = authorization is not None and origin(current) == trusted
            headers = {"Authorization": authorization or ""} if trusted_hop else {}
            async with session.get(current, headers=headers, allow_redirects=False) as response:
                if response.status in (301, 302, 303, 307, 308):
                    target = current.join(URL(response.headers.get("Location", "")))
                    if may_follow is None or not may_follow(current, target):
                        raise MediaRefused("redirected to an address it may not follow")
                    current = target
                    continue
                response.raise_for_status()
                announced = response.content_length
                if announced is not None and announced > max_bytes:
                    raise MediaTooLarge(f"announced {announced} bytes")
                return await read_capped(response.content.iter_chunked(CHUNK), max_bytes)
    raise MediaRefused("too many redirects")
