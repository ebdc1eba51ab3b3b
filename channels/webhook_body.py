"""Reading a webhook's body without trusting it: bounded in size and in time.

A handler checks what it can from the headers first (authentication, content type,
``Content-Length``), then reads the body through ``read_body``: at most ``limit``
bytes (413 past it, chunked bodies included) within ``within`` seconds (408 when the
sender stalls). ``parse_form`` turns an ``application/x-www-form-urlencoded`` body into
fields or refuses it with a 4xx; nothing here answers 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from aiohttp.http_exceptions import HttpProcessingError
from multidict import MultiDict

if TYPE_CHECKING:  # aiohttp.web loads with the HTTP server, after the channels poll
    from aiohttp import web

FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FIELDS = 200
"""More fields than any webhook we take sends (Twilio: about 40 with ten media)."""
READ_TIMEOUT = 10.0


class BodyRefused(Exception):
    """The body cannot be taken; ``status`` is the 4xx to answer with."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> web.Response:
        from aiohttp import web

        return web.Response(status=self.status, text=self.reason)


def check_form_type(request: web.Request) -> None:
    """415 unless the body is declared a UTF-8 (or charset-less) URL-encoded form."""
    charset = (request.charset or "utf-8").lower().replace("_", "-")
    if request.content_type != FORM_TYPE or charset not in ("utf-8", "utf8"):
        raise BodyRefused(415, f"expected {FORM_TYPE} in UTF-8")


async def read_body(request: web.Request, *, limit: int, within: float = READ_TIMEOUT) -> bytes:
    """The whole body: at most ``limit`` bytes, all of it within ``within`` seconds."""
    from aiohttp.web_protocol import RequestPayloadError

    length = request.content_length
    if length is not None and length > limit:
        raise BodyRefused(413, f"body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(within):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > limit:
                    raise BodyRefused(413, f"body over {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyRefused(408, f"body not received within {within:g} s") from None
    except (HttpProcessingError, RequestPayloadError):  # bad chunking, bad Content-Encoding
        raise BodyRefused(400, "malformed body") from None
    return b"".join(chunks)


async def read_json_object(
    request: web.Request, *, limit: int, within: float = READ_TIMEOUT
) -> dict[str, Any]:
    """The body as a JSON object (``read_body``'s limits), its text made storable:
    invalid UTF-8 and lone surrogates (``"\\ud83d"`` alone is valid JSON) become U+FFFD.
    ``BodyRefused`` 400 for anything but an object, nesting past the parser included."""
    from channels.delivery.text import clean_text, clean_value

    raw = await read_body(request, limit=limit, within=within)
    try:
        data = clean_value(json.loads(clean_text(raw)))
    except (ValueError, RecursionError):  # not JSON, or nested absurdly deep
        raise BodyRefused(400, "body must be a JSON object") from None
    if not isinstance(data, dict):
        raise BodyRefused(400, "body must be a JSON object")
    return data


def parse_form(body: bytes, *, max_fields: int = MAX_FIELDS) -> MultiDict[str]:
    """The fields of a URL-encoded form, repeated names kept; 400 if it is not one."""
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=max_fields)
    except ValueError:  # UnicodeDecodeError included: not UTF-8, raw or percent-encoded
        raise BodyRefused(400, "malformed form") from None
    return MultiDict(pairs)


class Throttled:
    """Warnings about refused requests: each message at most once per ``every`` seconds,
    saying how many like it were left out since; a flood of bad requests is not a
    flood of log lines."""

    def __init__(
        self,
        logger: logging.Logger,
        every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._every = every
        self._clock = clock
        self._state: dict[str, tuple[float, int]] = {}
        """Per message: when it may be logged again, and how many were left out."""

    def warning(self, msg: str, *args: object) -> None:
        now = self._clock()
        due, skipped = self._state.get(msg, (0.0, 0))
        if now < due:
            self._state[msg] = (due, skipped + 1)
            return
        self._state[msg] = (now + self._every, 0)
        if skipped:
            self._log.warning(f"{msg} (%d more like it left out of the log)", *args, skipped)
        else:
            self._log.warning(msg, *args)
