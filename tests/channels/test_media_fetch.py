"""The download helpers: reading stops at the cap, redirects are checked hop by hop and
credentials never leave the origin they belong to; the notes the model reads."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from channels.delivery.media import MediaCaps, too_large_note, too_long_note
from channels.http_fetch import fetch_capped, read_capped
from channels.types import MediaRefused, MediaTooLarge
from storage.repos.inbox import MediaEntry
from tests.fakes.huge_answer import MIB, huge_answer

AUTH = "Basic c2VjcmV0OnNlY3JldA=="


async def test_reading_stops_at_the_first_chunk_past_the_cap() -> None:
    pulled: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for n in range(1000):  # 64 MB if read to the end
            pulled.append(n)
            yield b"x" * 65536

    with pytest.raises(MediaTooLarge):
        await read_capped(chunks(), 200_000)
    assert len(pulled) == 4  # 4 * 65,536 is the first total over 200,000
    assert await read_capped(_just(b"abc"), 3) == b"abc"


async def test_an_endless_download_stops_at_the_cap() -> None:
    """No ``Content-Length`` and no end: the download stops past the cap and the
    connection closes (what the server counts is the cap plus socket buffers)."""
    async with huge_answer(1024 * MIB) as server:
        with pytest.raises(MediaTooLarge):
            await fetch_capped(server.url, 2 * MIB)
        await server.done.wait()
    assert server.sent < 2 * MIB + 16 * MIB


async def _just(data: bytes) -> AsyncIterator[bytes]:
    yield data


class _Host:
    """One HTTP server recording the Authorization header of each request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.redirect_to: str | None = None
        self.server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.path, request.headers.get("Authorization")))
        if request.path == "/start" and self.redirect_to is not None:
            raise web.HTTPFound(self.redirect_to)
        return web.Response(body=b"image-bytes", content_type="image/png")

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")


@pytest.fixture
async def hosts() -> AsyncIterator[tuple[_Host, _Host]]:
    pair = (_Host(), _Host())
    for host in pair:
        app = web.Application()
        app.router.add_get("/{tail:.*}", host.handle)
        host.server = TestServer(app, host="127.0.0.1", port=0)
        await host.server.start_server()
    yield pair
    for host in pair:
        assert host.server is not None
        await host.server.close()


async def test_credentials_stay_on_their_origin_across_redirects(
    hosts: tuple[_Host, _Host],
) -> None:
    api, cdn = hosts
    api.redirect_to = f"{cdn.url}/file"
    data = await fetch_capped(
        f"{api.url}/start", 1000, authorization=AUTH, auth_origin=api.url,
        may_follow=lambda _a, _b: True,
    )  # fmt: skip
    assert data == b"image-bytes"
    assert api.seen == [("/start", AUTH)] and cdn.seen == [("/file", None)]


async def test_a_redirect_is_followed_only_when_allowed(hosts: tuple[_Host, _Host]) -> None:
    api, cdn = hosts
    api.redirect_to = f"{cdn.url}/file"
    with pytest.raises(MediaRefused):
        await fetch_capped(f"{api.url}/start", 1000)
    with pytest.raises(MediaRefused):
        await fetch_capped(f"{api.url}/start", 1000, may_follow=lambda _a, b: b.scheme == "https")
    assert cdn.seen == []
    api.redirect_to = "/same-host"  # relative: same origin
    same = lambda a, b: (a.host, a.port) == (b.host, b.port)  # noqa: E731
    assert await fetch_capped(f"{api.url}/start", 1000, may_follow=same) == b"image-bytes"


async def test_an_announced_length_over_the_cap_is_not_read(hosts: tuple[_Host, _Host]) -> None:
    api, _ = hosts
    with pytest.raises(MediaTooLarge):
        await fetch_capped(f"{api.url}/file", 5)


def test_notes_are_polite_and_name_the_limit() -> None:
    caps = MediaCaps(max_bytes=20_000_000, max_audio_seconds=600)
    voice = MediaEntry(kind="audio", duration_s=840, size=1000)
    assert too_long_note(voice, caps) == (
        "[voice note of 14 min: too long to listen to; limit 10 min]"
    )
    assert too_long_note(MediaEntry(kind="audio", duration_s=600), caps) is None
    photo = MediaEntry(kind="image", size=25_300_000)
    assert too_long_note(photo, caps) == ("[photo of 25.3 MB: too large to look at; limit 20 MB]")
    assert too_long_note(MediaEntry(kind="image", size=None), caps) is None
    assert too_large_note(MediaEntry(kind="audio"), caps) == (
        "[voice note: too large to listen to; limit 20 MB]"
    )
