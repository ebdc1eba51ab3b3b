"""OpenAI chat completions adapter (OpenAI itself or any compatible server).

The SDK's own retries are off (``max_retries=0``): ``ResilientModel`` owns the
retry policy so both providers behave the same. A server that rejects native
tools with a 400 is switched, once and for good, to the text protocol in
``agent.llm.textcalls``. Photos go as ``image_url`` content parts (a data URL); a
voice note goes as its transcript (made before, ``agent.llm.transcribe``) or a
marker. A server that refuses images with a 400 gets the turn again with markers,
and a model that says it cannot see images gets markers from then on.
The SDK is imported on first use, in a thread (``agent.llm.lazy_sdk``); its client
runs on aiohttp (``agent.llm.openai_client``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from agent.llm import textcalls
from agent.llm.base import UNREADABLE, ModelError, unexpected
from agent.llm.lazy_sdk import LazyImport
from agent.llm.limiter import response_retry_after
from agent.llm.openai_body import RequestBodies
from agent.llm.openai_client import CONNECTIONS, connection_error, make_client
from agent.llm.openai_content import (
    blind,
    joined,
    sends_images,
    transcribe_pending,
    user_content,
)
from agent.llm.openai_response import parse_completion
from agent.llm.turns import Turns
from agent.llm.types import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    call_ids,
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


class _ToolsUnsupported(Exception):
    """The server refused the ``tools`` parameter; retry the request in text mode."""


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
    ) -> None:
        self.model = model
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

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        """The next assistant message; every failure is a ``ModelError``."""
        try:
            await self.warm()
            await transcribe_pending(messages)
            if self.model in self._blind:
                return await self._request(system, blind(messages), tools)
            try:
                return await self._request(system, messages, tools)
            except ModelError as exc:
                if exc.status not in (400, 422) or not sends_images(messages):
                    raise
                # A model or server without vision: the turn again, with text markers.
                log.warning("%s refused images (%s); retrying with text markers", self.name, exc)
                if _NO_VISION.search(str(exc)):
                    self._blind.add(self.model)
                return await self._request(system, blind(messages), tools)
        except ModelError:
            raise
        except Exception as exc:  # the SDK or the answer did something unforeseen
            raise unexpected(self.name, exc, self._redact) from None

    async def _request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        if tools and not self.text_mode():
            try:
                return await self._native(system, messages, tools)
            except _ToolsUnsupported:
                log.warning(
                    "provider %s: model %s rejects native tools; using text tool calls from now",
                    self.name,
                    self.model,
                )
                self._text_mode.add(self.model)
        return await self._text(system, messages, tools)

    async def aclose(self) -> None:
        self._sdk.cancel()
        if self._client is not None:
            await self._client.close()

    async def _native(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        completion = await self._create(native_messages(system, messages), tools)
        return parse_completion(completion, {t.name for t in tools}, taken=call_ids(messages))

    async def _text(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        if tools:
            system = f"{system}\n\n{textcalls.tool_prompt(tools)}".strip()
        completion = await self._create(text_messages(system, messages), None)
        return parse_completion(
            completion, {t.name for t in tools}, text_only=True, taken=call_ids(messages)
        )

    async def _create(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec] | None
    ) -> dict[str, Any]:
        import openai  # imported by ``warm`` already: this import costs nothing

        client = self._client
        assert client is not None  # made by ``warm`` before any request

        async def post() -> object:
            body = self._bodies.encode(self.model, messages, tools)
            return await client.post("/chat/completions", content=body, cast_to=object)

        try:
            # The SDK's public ``client.post`` (its documented door for requests its typed
            # methods do not shape), which ``chat.completions.create`` ends in, without
            # create's walk of the body against the typed params: that walk costs more
            # CPU than the rest of a message's handling together (tens of ms with our tool
            # schemas), and changes nothing in a body already in wire form. The body goes
            # as encoded bytes (``agent.llm.openai_body``). Errors are the same; the answer
            # comes back as its JSON (``cast_to=object``), read by parse_completion
            # without building the SDK's ``ChatCompletion`` objects first. Built in turn
            # with the other requests of a burst (``agent.llm.turns``).
            completion = await self._turns.run(post)
        except openai.APIStatusError as exc:
            detail = self._redact(_detail(exc))
            if tools and textcalls.tools_unsupported(exc.status_code, detail):
                raise _ToolsUnsupported from None
            retryable = exc.status_code in (408, 409, 429) or exc.status_code >= 500
            raise ModelError(
                f"{self.name} HTTP {exc.status_code}: {detail}",
                retryable=retryable,
                status=exc.status_code,
                retry_after=response_retry_after(exc.response),
            ) from None
        except openai.APIConnectionError as exc:  # a timeout is one too
            raise connection_error(self.name, exc, self._redact) from None
        except openai.OpenAIError as exc:
            raise ModelError(
                f"{self.name}: {type(exc).__name__}: {self._redact(str(exc))}", retryable=False
            ) from None
        if not isinstance(completion, dict):
            # A body that is not JSON (an HTML error page with status 200 from a proxy):
            # the SDK hands back its text instead of a completion.
            raise ModelError(
                f"{self.name}: the answer was not a chat completion "
                f"({type(completion).__name__}: {self._redact(str(completion))[:200]!r})",
                retryable=True,
                reason=UNREADABLE,
            )
        return completion

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


def native_messages(system: str, messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """Neutral history → chat completions messages with native tool calls and results."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": user_content(message)})
        elif message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            calls = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in message.tool_calls
            ]
            if calls:
                entry["tool_calls"] = calls
            elif entry["content"] is None:
                entry["content"] = ""
            out.append(entry)
        else:
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": part.call_id,
                            "content": json.dumps(part.result, ensure_ascii=False, default=str),
                        }
                    )
            if message.text:
                out.append({"role": "user", "content": message.text})
    return out


def text_messages(system: str, messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """Neutral history → plain chat messages, tool traffic rendered as text blocks.

    Consecutive messages of one role are merged: many chat templates insist on
    alternating user and assistant turns.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        chunks: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                if part.text:
                    chunks.append(part.text)
            elif isinstance(part, ToolCallPart):
                chunks.append(textcalls.render_tool_call(part.name, part.arguments))
            elif isinstance(part, ToolResultPart):
                chunks.append(textcalls.render_tool_result(part.name, part.result))
            else:
                chunks.append(part.fallback_text())
        content: str | list[dict[str, Any]] = "\n".join(chunks)
        if message.role == "user" and sends_images([message]):
            content = user_content(message)
        if out and out[-1]["role"] == role and role != "system":
            out[-1]["content"] = joined(out[-1]["content"], content)
        else:
            out.append({"role": role, "content": content})
    return out
