"""The ``AsyncOpenAI`` client both OpenAI jobs use (chat completions, transcription).

The real SDK, over aiohttp (``openai.DefaultAioHttpClient``, an ``httpx2.AsyncClient``
whose transport is the SDK's vendored httpx-aiohttp) instead of httpx2's own
httpcore/anyio transport: the same requests for less CPU per call, and aiohttp is
loaded by the app already. The aiohttp session is made on the first request, inside
the running loop, and closed with the client (``AsyncOpenAI.close``).

That transport maps every ``aiohttp.ClientConnectionError`` it does not know better
to ``httpx2.ConnectTimeout``, so a refused connection reaches us as an
``APITimeoutError``: ``connection_error`` looks at the aiohttp error underneath.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiohttp

from agent.llm.base import ModelError

if TYPE_CHECKING:
    import openai

CONNECTIONS = 1000
"""Connections one client may hold open, at least (the SDK's own default): above any
likely ``MAX_CONCURRENT_MODEL_CALLS``; aiohttp's own default (100) would queue past it."""
KEEPALIVE_S = 5.0
"""Idle pooled connections close after this (httpx2's default)."""


def api_base(base_url: str | None) -> str | None:
    """``OPENAI_BASE_URL`` as the SDK wants it: a bare host gets ``/v1`` appended.

    Both spellings are common (``http://localhost:11434`` and
    ``http://localhost:11434/v1``); any explicit path is left as given.
    """
    if not base_url:
        return None
    if urlsplit(base_url).path.strip("/") == "":
        return base_url.rstrip("/") + "/v1"
    return base_url


def make_client(
    api_key: str,
    base_url: str | None,
    *,
    timeout: float,
    max_retries: int,
    max_connections: int = CONNECTIONS,
) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` on aiohttp; ``timeout`` bounds connecting, each read and the
    wait for a pooled connection (no total), as httpx2's transport does."""
    import httpx2
    import openai

    limits = httpx2.Limits(
        max_connections=max(max_connections, CONNECTIONS),
        max_keepalive_connections=None,
        keepalive_expiry=KEEPALIVE_S,
    )
    http_client = openai.DefaultAioHttpClient(timeout=timeout, limits=limits)
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=api_base(base_url),
        timeout=timeout,
        max_retries=max_retries,
        http_client=http_client,
    )


def transport_error(exc: BaseException) -> BaseException:
    """The aiohttp error under the SDK's and httpx2's, else the innermost ``__cause__``."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        if isinstance(exc, aiohttp.ClientError):
            return exc
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def timed_out(exc: openai.APIConnectionError) -> bool:
    """Whether the request ran out of time (not: the server could not be reached)."""
    import openai

    if not isinstance(exc, openai.APITimeoutError):
        return False
    cause = transport_error(exc)
    return isinstance(cause, TimeoutError) or not isinstance(cause, aiohttp.ClientConnectionError)


def describe(exc: openai.APIConnectionError) -> str:
    """What went wrong, as the transport said it (``Cannot connect to host ...``)."""
    cause = transport_error(exc)
    return str(cause) or type(cause).__name__


def connection_error(
    provider: str, exc: openai.APIConnectionError, redact: Callable[[str], str]
) -> ModelError:
    """The retryable ``ModelError`` for a request that timed out or never connected."""
    if timed_out(exc):
        return ModelError(f"{provider}: request timed out", retryable=True)
    return ModelError(f"{provider}: connection failed: {redact(describe(exc))}", retryable=True)
