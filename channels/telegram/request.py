"""python-telegram-bot's transport on aiohttp instead of httpx.

PTB talks to the Bot API through a ``telegram.request.BaseRequest``; its stock one,
``HTTPXRequest``, spends most of each call's CPU in httpx, httpcore and anyio (socket
readability polls, per-call attribute lookups). ``AiohttpRequest`` is the same contract
on aiohttp, which the app already runs for its HTTP server and media downloads.

Behaviour kept from ``HTTPXRequest``:

- Parameters go out form-encoded (``RequestData.json_parameters``); a request with
  files goes out as ``multipart/form-data`` with the files as parts.
- Timeouts: ``DEFAULT_NONE`` means this object's default; ``None`` means no limit. The
  read timeout runs from the end of the upload to each chunk of the answer, as httpx's
  does (PTB adds the long-poll ``timeout`` to it for ``getUpdates``). Uploads with files
  default to ``media_write_timeout``.
- A request waits at most ``pool_timeout`` for one of ``connection_pool_size``
  connections, then fails with the same ``TimedOut`` message as httpx's ``PoolTimeout``;
  the wait is a semaphore, so hundreds of queued callers cost O(1) each.
- Any timeout raises ``TimedOut``; any other transport failure raises
  ``NetworkError("aiohttp.<Error>: ...")``. Status codes are PTB's business.
- Idle connections are closed after ``keepalive_seconds`` (httpx's default is 5 s).
- Proxies from ``HTTPS_PROXY``/``ALL_PROXY``/``NO_PROXY`` apply, as with httpx; the
  environment is read only when one is set (aiohttp would read it per request).

Differences: aiohttp has no per-write timeout. Small bodies go straight into the
socket buffer; an upload with files gets an overall deadline of
connect + write + read timeouts instead. TLS uses aiohttp's default context (the
system trust store, as the app's other aiohttp clients do), not certifi's bundle. An
answer is read up to ``answer_limit`` bytes (a Bot API file is at most 20 MB): past it
the call fails with ``NetworkError`` and the rest is never received.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
import urllib.request
from typing import IO, Final

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from channels.http_fetch import read_at_most

log = logging.getLogger("telegram.AiohttpRequest")
"""Named like PTB's own ``telegram.HTTPXRequest`` logger; the URLs it logs carry the token,
so the channel attaches its redacting filter to it."""
FORM: Final = {"Content-Type": "application/x-www-form-urlencoded"}
POOL_TIMEOUT_MESSAGE: Final = (
    "Pool timeout: All connections in the connection pool are occupied. "
    "Request was *not* sent to Telegram. Consider adjusting the connection "
    "pool size or the pool timeout."
)
PROXY_VARIABLES: Final = ("http", "https", "all")
ANSWER_LIMIT: Final = 64 * 1024 * 1024
"""Bytes of one answer read: a Bot API file is at most 20 MB, its JSON far less."""


def _proxy_in_env() -> bool:
    """Whether a proxy is configured in the environment (``HTTPS_PROXY`` and the like)."""
    return any(scheme in PROXY_VARIABLES for scheme in urllib.request.getproxies_environment())


Timeout = object
"""A timeout argument as PTB passes it: seconds, ``None`` (no limit), or
``BaseRequest.DEFAULT_NONE`` (not passed: this object's default)."""


def _pick(value: Timeout, default: float | None) -> float | None:
    """``value`` unless it is PTB's "not passed" sentinel, ``BaseRequest.DEFAULT_NONE``."""
    if value is BaseRequest.DEFAULT_NONE:
        return default
    if value is None or isinstance(value, int | float):
        return value
    raise TypeError(f"a timeout is a number of seconds or None, not {value!r}")


def _all_default(*values: Timeout) -> bool:
    return all(value is BaseRequest.DEFAULT_NONE for value in values)


def _multipart(
    params: dict[str, str], files: dict[str, tuple[str, bytes | IO[bytes], str]]
) -> aiohttp.FormData:
    form = aiohttp.FormData()
    for name, value in params.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in files.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return form


class AiohttpRequest(BaseRequest):
    """A ``BaseRequest`` on one ``aiohttp.ClientSession``, built in ``initialize``.

    Arguments and defaults follow ``HTTPXRequest``; ``keepalive_seconds`` is how long an
    idle connection stays open for reuse.
    """

    __slots__ = (
        "_answer_limit",
        "_connect_timeout",
        "_default_timeout",
        "_keepalive",
        "_media_write_timeout",
        "_pool_size",
        "_pool_timeout",
        "_read_timeout",
        "_session",
        "_slots",
        "_write_timeout",
    )

    def __init__(
        self,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
        keepalive_seconds: float = 5.0,
        answer_limit: int = ANSWER_LIMIT,
    ) -> None:
        if connection_pool_size < 1:
            raise ValueError("connection_pool_size must be at least 1")
        self._pool_size = connection_pool_size
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        self._keepalive = keepalive_seconds
        self._answer_limit = answer_limit
        self._default_timeout = self._timeout(
            False, self.DEFAULT_NONE, self.DEFAULT_NONE, self.DEFAULT_NONE
        )
        self._session: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None

    @property
    def read_timeout(self) -> float | None:
        """The read timeout used when a call does not pass one."""
        return self._read_timeout

    @property
    def pool_size(self) -> int:
        return self._pool_size

    async def initialize(self) -> None:
        """Open the session (again, after ``shutdown``); a no-op while it is open."""
        if self._session is not None and not self._session.closed:
            return
        connector = aiohttp.TCPConnector(limit=self._pool_size, keepalive_timeout=self._keepalive)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": self.USER_AGENT},
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=_proxy_in_env(),
            raise_for_status=False,
        )
        self._slots = asyncio.Semaphore(self._pool_size)

    async def shutdown(self) -> None:
        """Close the session and its connections; a no-op when already closed."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def _acquire(self, slots: asyncio.Semaphore, pool_timeout: float | None) -> None:
        if not slots.locked():
            await slots.acquire()  # a free slot: no timer needed
            return
        try:
            async with asyncio.timeout(pool_timeout):
                await slots.acquire()
        except TimeoutError as exc:
            raise TimedOut(message=POOL_TIMEOUT_MESSAGE) from exc

    def _timeout(
        self,
        has_files: bool,
        read: Timeout,
        write: Timeout,
        connect: Timeout,
    ) -> aiohttp.ClientTimeout:
        read_s = _pick(read, self._read_timeout)
        connect_s = _pick(connect, self._connect_timeout)
        default_write = self._media_write_timeout if has_files else self._write_timeout
        write_s = _pick(write, default_write)
        total: float | None = None
        if has_files and None not in (read_s, connect_s, write_s):
            total = (read_s or 0) + (connect_s or 0) + (write_s or 0)
        # sock_connect is the TCP/TLS connect; connect also covers aiohttp's own pool wait,
        # which never happens here (the semaphore admits at most pool_size requests).
        return aiohttp.ClientTimeout(
            total=total, connect=connect_s, sock_connect=connect_s, sock_read=read_s
        )

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Timeout = BaseRequest.DEFAULT_NONE,
        write_timeout: Timeout = BaseRequest.DEFAULT_NONE,
        connect_timeout: Timeout = BaseRequest.DEFAULT_NONE,
        pool_timeout: Timeout = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """See ``BaseRequest.do_request``: the status code and the body of the answer."""
        session, slots = self._session, self._slots
        if session is None or slots is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = False
        body: bytes | aiohttp.FormData | None = None
        headers: dict[str, str] | None = None
        if request_data is not None:
            params = request_data.json_parameters
            files = request_data.contains_files
            if files:
                body = _multipart(params, request_data.multipart_data)
            elif params:
                body = urllib.parse.urlencode(params).encode()
                headers = FORM
        if files or not _all_default(read_timeout, write_timeout, connect_timeout):
            timeout = self._timeout(files, read_timeout, write_timeout, connect_timeout)
        else:
            timeout = self._default_timeout  # the common case: built once
        await self._acquire(slots, _pick(pool_timeout, self._pool_timeout))
        try:
            async with session.request(
                method, url, data=body, headers=headers, timeout=timeout
            ) as response:
                payload, whole = await read_at_most(response, self._answer_limit)
            if not whole:
                raise NetworkError(f"the answer is over {self._answer_limit} bytes; not read")
            if log.isEnabledFor(logging.DEBUG):  # httpx logged each request at INFO
                log.debug(
                    'HTTP Request: %s %s "%d %s"', method, url, response.status, response.reason
                )
            return response.status, payload
        except TimeoutError as exc:  # aiohttp's timeout errors are TimeoutErrors too
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{exc.__class__.__name__}: {exc}") from exc
        finally:
            slots.release()
