"""Gemini adapter over google-genai (``models.generate_content``), one call per turn.

Automatic function calling is off: our loop runs the tools. Opaque data Gemini
attaches to parts (thought signatures, its own call ids) is kept in the neutral
part's ``provider_data`` as JSON-safe values, so it survives a trip through
MongoDB, and is sent back unchanged; newer models refuse multi-turn tool use
without it. The SDK's own retries are off: ``ResilientModel`` owns retrying.
"""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import aiohttp
import httpx2
from google import genai
from google.genai import errors
from google.genai import types as gt

from agent.llm.base import ModelError, unexpected
from agent.llm.limiter import Turns, response_retry_after, retry_delay_from_details
from agent.llm.types import (
    MAX_OUTPUT_TOKENS,
    MediaPart,
    ModelMessage,
    ModelResponse,
    NotePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    Usage,
    call_ids,
    new_call_id,
    unique_ids,
    without_media,
)

log = logging.getLogger(__name__)

SIGNATURE_KEY = "gemini_thought_signature"
"""provider_data key: the part's thought signature, standard base64."""
CALL_ID_KEY = "gemini_call_id"
"""provider_data key: the call id Gemini itself gave (absent when we made one up)."""
THOUGHT_KEY = "gemini_thought"
"""provider_data key: the part was a thought summary, whose text is kept here, not shown."""
SKIP_SIGNATURE = base64.urlsafe_b64decode("skip_thought_signature_validator")
"""Google's documented stand-in for a call Gemini did not sign (history from another
model): on the wire it reads ``"thoughtSignature": "skip_thought_signature_validator"``."""
_OLD_MODEL = re.compile(r"^(?:models/)?gemini-[12][.-]")

_BLOCKED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
    }
)
_TRANSIENT = frozenset(
    {"MALFORMED_FUNCTION_CALL", "MALFORMED_RESPONSE", "MISSING_THOUGHT_SIGNATURE"}
)


class GeminiModel:
    """A ``ModelClient`` over ``POST {base}/{version}/models/{model}:generateContent``."""

    name = "gemini"
    native_media = frozenset({"image", "audio"})

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
    ) -> None:
        self.model = model
        self._max_output = max_output_tokens
        """Asked for on every request (thinking included): a call's cost is bounded."""
        self._secret = api_key
        self._client = genai.Client(
            api_key=api_key,
            http_options=gt.HttpOptions(
                base_url=base_url,
                timeout=int(timeout * 1000),
                # An explicit single attempt also turns off the SDK's hidden
                # sleep-and-retry on connection errors.
                retry_options=gt.HttpRetryOptions(attempts=1),
            ),
        )
        self._turns = Turns()

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        """The next assistant message; every failure is a ``ModelError``."""
        try:
            try:
                return await self._request(system, messages, tools)
            except ModelError as exc:
                if exc.status != 400 or not _sends_media(messages):
                    raise
                # A model that cannot take this media: the turn again, with text markers.
                log.warning("%s refused media (%s); retrying with text markers", self.name, exc)
                return await self._request(system, [without_media(m) for m in messages], tools)
        except ModelError:
            raise
        except Exception as exc:  # the SDK could not read the answer (not JSON, too deep)
            raise unexpected(self.name, exc, self._redact) from None

    async def _request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        config = gt.GenerateContentConfig(
            system_instruction=system or None,
            tools=[gt.Tool(function_declarations=[_declaration(t) for t in tools])]
            if tools
            else None,
            automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True),
            max_output_tokens=self._max_output,
        )

        async def generate() -> gt.GenerateContentResponse:
            contents = to_contents(messages, sign_unsigned=not _OLD_MODEL.match(self.model))
            return await self._client.aio.models.generate_content(
                model=self.model, contents=contents, config=config
            )

        try:
            # Built in turn with the other requests of a burst (``agent.llm.limiter``).
            response = await self._turns.run(generate)
        except errors.APIError as exc:
            code = int(exc.code or 0)
            retryable = code in (408, 429) or code >= 500
            detail = self._redact(f"{exc.status or ''} {exc.message or ''}".strip())[:500]
            wait = response_retry_after(exc.response)
            raise ModelError(
                f"{self.name} HTTP {code}: {detail}",
                retryable=retryable,
                status=code or None,
                retry_after=wait if wait is not None else retry_delay_from_details(exc.details),
            ) from None
        except (TimeoutError, httpx2.TimeoutException):
            raise ModelError(f"{self.name}: request timed out", retryable=True) from None
        except (aiohttp.ClientError, httpx2.TransportError) as exc:
            raise ModelError(
                f"{self.name}: connection failed: {self._redact(str(exc))}", retryable=True
            ) from None
        return parse_response(response, self.model, taken=call_ids(messages))

    async def aclose(self) -> None:
        await self._client.aio.aclose()

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _declaration(tool: ToolSpec) -> gt.FunctionDeclaration:
    return gt.FunctionDeclaration(
        name=tool.name, description=tool.description, parameters_json_schema=tool.parameters
    )


def _signature(provider_data: dict[str, Any] | None) -> bytes | None:
    value = (provider_data or {}).get(SIGNATURE_KEY)
    return base64.b64decode(value) if isinstance(value, str) else None


def to_contents(messages: list[ModelMessage], sign_unsigned: bool = False) -> list[gt.Content]:
    """Neutral history → Gemini contents, opaque data restored from ``provider_data``.

    With ``sign_unsigned`` (Gemini 3 and later), a step of the current turn whose
    calls carry no signature (they came from the fallback provider) gets Google's
    skip-validation stand-in on its first call; otherwise the request fails with 400.
    """
    native_ids = {
        call.id
        for message in messages
        for call in message.tool_calls
        if (call.provider_data or {}).get(CALL_ID_KEY)
    }
    turn_start = max(
        (i for i, m in enumerate(messages) if m.role == "user" and (m.text or m.media)),
        default=0,
    )
    contents: list[gt.Content] = []
    for index, message in enumerate(messages):
        parts: list[gt.Part] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                parts.extend(_text_part(part))
            elif isinstance(part, ToolCallPart):
                parts.append(_call_part(part))
            elif isinstance(part, MediaPart):
                parts.append(_media_part(part))
            elif isinstance(part, NotePart):
                parts.append(gt.Part(text=part.text))
            else:
                parts.append(_result_part(part, part.call_id in native_ids))
        if sign_unsigned and index > turn_start:
            _sign_first_call(parts)
        if parts:
            role = "model" if message.role == "assistant" else "user"
            contents.append(gt.Content(role=role, parts=parts))
    return contents


def _sign_first_call(parts: list[gt.Part]) -> None:
    calls = [p for p in parts if p.function_call is not None]
    if calls and not any(p.thought_signature for p in calls):
        calls[0].thought_signature = SKIP_SIGNATURE


def _text_part(part: TextPart) -> list[gt.Part]:
    data = part.provider_data or {}
    signature = _signature(data)
    thought = data.get(THOUGHT_KEY)
    if isinstance(thought, str):
        return [gt.Part(text=thought, thought=True, thought_signature=signature)]
    if not part.text and signature is None:
        return []
    return [gt.Part(text=part.text, thought_signature=signature)]


def _sends_media(messages: list[ModelMessage]) -> bool:
    return any(p.data is not None for m in messages for p in m.media)


def _media_part(part: MediaPart) -> gt.Part:
    """Images and audio go inline (``inlineData``); without bytes, the text fallback."""
    if part.data is None:
        return gt.Part(text=part.fallback_text())
    mime = part.mime.split(";")[0].strip() or "application/octet-stream"
    return gt.Part.from_bytes(data=part.data, mime_type=mime)


def _call_part(part: ToolCallPart) -> gt.Part:
    data = part.provider_data or {}
    call_id = data.get(CALL_ID_KEY)
    return gt.Part(
        function_call=gt.FunctionCall(
            id=call_id if isinstance(call_id, str) else None,
            name=part.name,
            args=part.arguments,
        ),
        thought_signature=_signature(data),
    )


def _result_part(part: ToolResultPart, native_id: bool) -> gt.Part:
    result: Any = part.result
    response = result if isinstance(result, dict) else {"data": result}
    return gt.Part(
        function_response=gt.FunctionResponse(
            id=part.call_id if native_id else None, name=part.name, response=response
        )
    )


def parse_response(
    response: gt.GenerateContentResponse, model: str, taken: set[str] | None = None
) -> ModelResponse:
    """Gemini answer → neutral assistant message; blocked or empty answers raise.

    Call ids repeated within the answer, or reusing one in ``taken`` (the history
    sent), are made unique, Gemini's own copy (``CALL_ID_KEY``) too: each result then
    goes back under the id of the call that produced it.
    """
    if not response.candidates:
        feedback = response.prompt_feedback
        reason = feedback.block_reason if feedback else None
        raise ModelError(f"gemini: no answer (prompt blocked: {reason})", retryable=False)
    candidate = response.candidates[0]
    raw_parts = candidate.content.parts if candidate.content else None
    parts: list[TextPart | ToolCallPart] = []
    for raw in raw_parts or []:
        part = _neutral_part(raw)
        if part is not None:
            parts.append(part)
    parts = _unique_call_ids(parts, taken or set())
    finish = str(getattr(candidate.finish_reason, "value", candidate.finish_reason) or "")
    if not parts and finish in _BLOCKED:
        raise ModelError(f"gemini: answer blocked ({finish})", retryable=False)
    if not parts and finish in _TRANSIENT:
        raise ModelError(f"gemini: unusable answer ({finish})", retryable=True)
    meta = response.usage_metadata
    usage = Usage(
        input_tokens=(meta.prompt_token_count or 0) if meta else 0,
        output_tokens=((meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0))
        if meta
        else 0,
        cached_input_tokens=(meta.cached_content_token_count or 0) if meta else 0,
    )
    return ModelResponse(
        message=ModelMessage(role="assistant", parts=list(parts)),
        usage=usage,
        model=response.model_version or model,
    )


def _unique_call_ids(
    parts: list[TextPart | ToolCallPart], taken: set[str]
) -> list[TextPart | ToolCallPart]:
    fresh = iter(unique_ids([p.id for p in parts if isinstance(p, ToolCallPart)], taken))
    out: list[TextPart | ToolCallPart] = []
    for part in parts:
        if isinstance(part, ToolCallPart):
            new_id = next(fresh)
            if new_id != part.id:
                data = dict(part.provider_data or {})
                if CALL_ID_KEY in data:
                    data[CALL_ID_KEY] = new_id
                part = part.model_copy(update={"id": new_id, "provider_data": data or None})
        out.append(part)
    return out


def _neutral_part(raw: gt.Part) -> TextPart | ToolCallPart | None:
    data: dict[str, Any] = {}
    if raw.thought_signature:
        data[SIGNATURE_KEY] = base64.b64encode(raw.thought_signature).decode("ascii")
    if raw.function_call is not None:
        call = raw.function_call
        if call.id:
            data[CALL_ID_KEY] = call.id
        return ToolCallPart(
            id=call.id or new_call_id(),
            name=call.name or "",
            arguments=dict(call.args or {}),
            provider_data=data or None,
        )
    if raw.thought:
        data[THOUGHT_KEY] = raw.text or ""
        return TextPart(text="", provider_data=data)
    if raw.text is not None or data:
        return TextPart(text=raw.text or "", provider_data=data or None)
    return None
