"""An ``httpx2`` transport on aiohttp, for the OpenAI SDK's ``http_client``.

The SDK's own ``DefaultAioHttpClient`` builds its TLS context with
``httpx2.create_ssl_context``, which imports httpcore2 (with anyio, h11 and, where it
is installed, trio) although no request ever goes through it. This transport is the
same idea through public names only (``httpx2.AsyncBaseTransport``, an
``httpx2.AsyncClient(transport=...)``): aiohttp's default TLS context (the system trust
store, as the app's other aiohttp clients use) and proxies from the environment
(``HTTPS_PROXY``, ``NO_PROXY``: aiohttp's ``trust_env``, on only when one is set, as
aiohttp would otherwise read the environment on every request).

Errors map as the SDK's transport maps them, so ``agent.llm.openai.model`` reads them
the same way: the most specific httpx2 error for the aiohttp one, raised from it (every
other ``aiohttp.ClientConnectionError`` becomes ``httpx2.ConnectTimeout``).
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator

import aiohttp
import httpx2

PROXY_SCHEMES = ("http", "https", "all")
_ERRORS: dict[type[Exception], type[httpx2.TransportError]] = {
    aiohttp.ServerTimeoutError: httpx2.TimeoutException,
    aiohttp.SocketTimeoutError: httpx2.ReadTimeout,
    aiohttp.ClientConnectionError: httpx2.ConnectTimeout,
    aiohttp.ClientConnectorError: httpx2.ConnectError,
    aiohttp.ClientPayloadError: httpx2.ReadError,
    aiohttp.ClientProxyConnectionError: httpx2.ProxyError,
    aiohttp.ClientHttpProxyError: httpx2.ProxyError,
    aiohttp.NonHttpUrlClientError: httpx2.UnsupportedProtocol,
    aiohttp.InvalidUrlClientError: httpx2.UnsupportedProtocol,
}


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """aiohttp's errors as httpx2's, the aiohttp one kept as ``__cause__``."""
    try:
        yield
    except Exception as exc:
        found: type[httpx2.TransportError] | None = None
        for source, target in _ERRORS.items():
            if isinstance(exc, source) and (found is None or issubclass(target, found)):
                found = target
        if found is None:
            raise
        raise found(str(exc)) from exc


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Requests over one ``aiohttp.ClientSession``, made on the first request (inside the
    running loop) and closed with the transport. ``connections``: at most this many open
    at once; idle ones close after ``keepalive`` seconds."""

    def __init__(self, *, connections: int, keepalive: float) -> None:
        self._connections = connections
        self._keepalive = keepalive
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._connections, keepalive_timeout=self._keepalive
            )
            proxied = any(s in PROXY_SCHEMES for s in urllib.request.getproxies_environment())
            self._session = aiohttp.ClientSession(connector=connector, trust_env=proxied)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeout = request.extensions.get("timeout", {})
        data: bytes | httpx2.AsyncByteStream | None
        try:
            data = request.content or None
        except httpx2.RequestNotRead:  # a streamed body (an upload): aiohttp chunks it
            data = request.stream  # type: ignore[assignment]
            request.headers.pop("transfer-encoding", None)
        with _mapped():
            response = await self._open().request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=data,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                    connect=timeout.get("pool"),
                ),
                server_hostname=request.extensions.get("sni_hostname"),
            )
            # Read whole here (answers are small JSON; nothing streams), which releases
            # the connection: the SDK then reads it from memory, not through us.
            try:
                body = await response.read()
            finally:
                response.release()
        extensions: dict[str, object] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx2.Response(
            response.status,
            headers=response.raw_headers,
            stream=httpx2.ByteStream(body),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
