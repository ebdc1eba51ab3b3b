"""OpenAI chat completions adapter (OpenAI itself or any compatible server).

The SDK's own retries are off (``max_retries=0``): ``ResilientModel`` owns the
retry policy so both providers behave the same. A server that rejects native
tools with a 400 is switched, once and for good, to the text protocol in
``agent.llm.textcalls``. Photos go as ``image_url`` content parts (a data URL); a
voice note goes as its transcript (made before, ``agent.llm.transcribe``) or a
marker. A server that refuses images with a 400 gets the turn again with markers,
and a model that says it cannot see images gets markers from then on.
Every request bounds the answer (``MAX_OUTPUT_TOKENS``): ``max_completion_tokens`` to
OpenAI itself (its reasoning models refuse ``max_tokens``), ``max_tokens`` to other
servers (what compatible servers know); a server that says it does not take the one
sent gets the other from then on.
The SDK is imported on first use, in a thread (``agent.llm.lazy_sdk``). The wire
format, both ways, is ``agent.llm.openai.wire``.

The ``AsyncOpenAI`` client (``make_client``, also used for transcription and by
``watchkeeper doctor``) is the real SDK over aiohttp (an ``httpx2.AsyncClient`` whose
transport is ``agent.llm.openai.transport``) instead of httpx2's own httpcore/anyio
transport: the same requests for less CPU per call, and aiohttp is loaded by the app
already; unlike the SDK's ``DefaultAioHttpClient``, it does not load httpcore2 to build
a TLS context. The aiohttp session is made on the first request, inside the running
loop, and closed with the client (``AsyncOpenAI.close``). That transport maps every
``aiohttp.ClientConnectionError`` it does not know better to ``httpx2.ConnectTimeout``
(as the SDK's does), so a refused connection reaches us as an ``APITimeoutError``:
``connection_error`` looks at the aiohttp error underneath.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp

from agent.llm import textcalls
from agent.llm.base import UNREADABLE, ModelError, unexpected
from agent.llm.lazy_sdk import LazyImport
from agent.llm.limiter import Turns, response_retry_after
from agent.llm.openai.wire import (
    RequestBodies,
    native_messages,
    parse_completion,
    sends_images,
    text_messages,
)
from agent.llm.types import (
    MAX_OUTPUT_TOKENS,
    ModelMessage,
    ModelResponse,
    ToolSpec,
    call_ids,
    without_media,
)

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

_DETAIL_LIMIT = 500
_NO_VISION = re.compile(
    r"vision|multi-?modal|image[ _]?(?:url|input|content)|does not support image"
    r"|images? (?:is|are) not supported",
    re.IGNORECASE,
)
_UNKNOWN_FIELD = re.compile(
    r"unsupported|not supported|unrecognized|unknown|not permitted|extra", re.IGNORECASE
)
MOST_FIELDS = ("max_completion_tokens", "max_tokens")
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

    from agent.llm.openai.transport import AiohttpTransport

    transport = AiohttpTransport(
        connections=max(max_connections, CONNECTIONS), keepalive=KEEPALIVE_S
    )
    # As the SDK's own clients: its timeout, redirects followed. Proxies from the
    # environment are the transport's (aiohttp's ``trust_env``).
    http_client = httpx2.AsyncClient(
        transport=transport, timeout=timeout, follow_redirects=True, trust_env=False
    )
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


def blind(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [without_media(m) for m in messages]


def pending_transcripts(messages: list[ModelMessage]) -> Iterator[Callable[[], Awaitable[None]]]:
    """Voice notes left for this model to transcribe (it is the fallback of one that
    hears them), each taken when reached: transcribed before the request, so the model
    gets the words rather than a marker. A text-only exchange has none: nothing waits."""
    for part in (p for m in messages if m.role == "user" for p in m.media):
        hook, part.transcribe_later = part.transcribe_later, None
        if hook is not None and part.transcript is None:
            yield hook


class OpenAIModel:
    """A ``ModelClient`` over ``POST {base_url}/chat/completions``."""

    name = "openai"
    native_media = frozenset({"image"})
    """Voice notes arrive transcribed (``agent.llm.transcribe``)."""

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_connections: int = CONNECTIONS,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
    ) -> None:
        self.model = model
        self._max_output = max_output_tokens
        host = urlsplit(api_base(base_url) or "https://api.openai.com").hostname or ""
        self._most_field = MOST_FIELDS[0] if host.endswith("openai.com") else MOST_FIELDS[1]
        """The field bounding an answer's tokens, switched once if the server refuses it."""
        self._most_switched = False
        self._max_connections = max_connections
        self._secret = api_key
        self._timeout = timeout
        self._client: openai.AsyncOpenAI | None = None
        self._sdk = LazyImport("openai.types.chat")
        self._making = asyncio.Lock()
        self._text_mode: set[str] = set()
        self._blind: set[str] = set()
        """Models that refused images: they get the text markers instead."""
        self._base_url = base_url
        self._bodies = RequestBodies()
        self._turns = Turns()

    async def warm(self) -> None:
        """Import the SDK and make the client (its TLS context, its transport's
        imports: tens of ms) in a thread, once."""
        if self._client is not None:
            return
        await self._sdk.ready()
        async with self._making:
            if self._client is None:
                self._client = await asyncio.to_thread(
                    make_client,
                    self._secret,
                    self._base_url,
                    timeout=self._timeout,
                    max_retries=0,
                    max_connections=self._max_connections,
                )

    @property
    def endpoint(self) -> tuple[str, str | None]:
        """The key and base URL it calls: voice notes are transcribed on the same server."""
        return self._secret, self._base_url

    def text_mode(self, model: str | None = None) -> bool:
        """Whether tool calls for ``model`` (default: ours) go through the text protocol."""
        return (model or self.model) in self._text_mode

    async def aclose(self) -> None:
        self._sdk.cancel()
        if self._client is not None:
            await self._client.close()

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        """The next assistant message; every failure is a ``ModelError``.

        Two fallbacks, each taken once: a model that refuses native tools is switched to
        the text protocol for good; a server that refuses images gets the turn again
        with text markers (and, when it says it has no vision, markers from then on).
        """
        try:
            if self._client is None:
                await self.warm()
        except Exception as exc:  # the SDK cannot be loaded, or the client made
            raise unexpected(self.name, exc, self._redact) from None
        # Only once ``warm`` has loaded it in its thread: an import on the loop while
        # that thread is still importing would block the loop, and could meet the SDK's
        # modules half made.
        import openai

        try:
            for transcribe in pending_transcripts(messages):
                await transcribe()
            native = bool(tools) and not self.text_mode()
            seen = blind(messages) if self.model in self._blind else messages
            while True:
                if native:
                    wire, offered = native_messages(system, seen), tools
                else:
                    prompt = (
                        f"{system}\n\n{textcalls.tool_prompt(tools)}".strip() if tools else system
                    )
                    wire, offered = text_messages(prompt, seen), None
                try:
                    # The SDK's public ``client.post`` (its documented door for requests
                    # its typed methods do not shape), which ``chat.completions.create``
                    # ends in, without create's walk of the body against the typed
                    # params: that walk costs more CPU than the rest of a message's
                    # handling together (tens of ms with our tool schemas), and changes
                    # nothing in a body already in wire form. The body goes as encoded
                    # bytes (``agent.llm.openai.wire``). Errors are the same; the answer
                    # comes back as its JSON (``cast_to=object``), read by
                    # parse_completion without building the SDK's ``ChatCompletion``
                    # objects first. Built in turn with the other requests of a burst
                    # (``agent.llm.limiter``).
                    completion = await self._turns.run(functools.partial(self._post, wire, offered))
                except openai.APIStatusError as exc:
                    status, detail = exc.status_code, self._redact(_detail(exc))
                    if native and textcalls.tools_unsupported(status, detail):
                        log.warning(
                            "provider %s: model %s rejects native tools; using text tool "
                            "calls from now",
                            self.name,
                            self.model,
                        )
                        self._text_mode.add(self.model)
                        native = False
                        continue
                    if status in (400, 422) and self._refuses_most_field(detail):
                        log.warning(
                            "%s refused %s (HTTP %s: %s); asking with %s from now",
                            self.name,
                            self._most_field,
                            status,
                            detail,
                            self._other_most_field,
                        )
                        self._most_field = self._other_most_field
                        self._most_switched = True
                        continue
                    if status in (400, 422) and seen is messages and sends_images(messages):
                        # A model or server without vision: the turn again, with markers.
                        log.warning(
                            "%s refused images (HTTP %s: %s); retrying with text markers",
                            self.name,
                            status,
                            detail,
                        )
                        if _NO_VISION.search(detail):
                            self._blind.add(self.model)
                        seen = blind(messages)
                        continue
                    raise ModelError(
                        f"{self.name} HTTP {status}: {detail}",
                        retryable=status in (408, 409, 429) or status >= 500,
                        status=status,
                        retry_after=response_retry_after(exc.response),
                    ) from None
                except openai.APIConnectionError as exc:  # a timeout is one too
                    raise connection_error(self.name, exc, self._redact) from None
                except openai.OpenAIError as exc:
                    raise ModelError(
                        f"{self.name}: {type(exc).__name__}: {self._redact(str(exc))}",
                        retryable=False,
                    ) from None
                if not isinstance(completion, dict):
                    # A body that is not JSON (an HTML error page with status 200 from a
                    # proxy): the SDK hands back its text instead of a completion.
                    raise ModelError(
                        f"{self.name}: the answer was not a chat completion "
                        f"({type(completion).__name__}: "
                        f"{self._redact(str(completion))[:200]!r})",
                        retryable=True,
                        reason=UNREADABLE,
                    )
                names, taken = {t.name for t in tools}, call_ids(seen)
                return parse_completion(completion, names, text_only=not native, taken=taken)
        except ModelError:
            raise
        except Exception as exc:  # the SDK or the answer did something unforeseen
            raise unexpected(self.name, exc, self._redact) from None

    def _post(self, wire: list[dict[str, Any]], tools: list[ToolSpec] | None) -> Awaitable[object]:
        """``POST /chat/completions`` with ``wire`` as its encoded body: encoded here, in
        the caller's turn (``Turns.run``), then the SDK's request to await."""
        client = self._client
        assert client is not None  # made by ``warm`` before any request
        most = (self._most_field, self._max_output)
        body = self._bodies.encode(self.model, wire, tools, most)
        return client.post("/chat/completions", content=body, cast_to=object)

    @property
    def _other_most_field(self) -> str:
        return MOST_FIELDS[1] if self._most_field == MOST_FIELDS[0] else MOST_FIELDS[0]

    def _refuses_most_field(self, detail: str) -> bool:
        """Whether a 400 says the field bounding the answer is not taken (switched at
        most once: a server refusing both gets its error)."""
        if self._most_switched or self._most_field not in detail:
            return False
        return bool(_UNKNOWN_FIELD.search(detail))

    def _redact(self, text: str) -> str:
        """Remove the key from error text: some servers echo it back in their errors."""
        return text.replace(self._secret, "***") if self._secret else text


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        text = json.dumps(body, ensure_ascii=False, default=str)
    elif body is not None:
        text = str(body)
    else:
        text = exc.message
    return text[:_DETAIL_LIMIT]
