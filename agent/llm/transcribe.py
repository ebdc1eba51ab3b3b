"""Voice notes to text for models that cannot hear (``POST {base}/audio/transcriptions``).

OpenAI chat models take images but not a voice note; the note is transcribed once on
the same OpenAI-compatible base URL (model ``OPENAI_TRANSCRIBE_MODEL``) and the
transcript becomes the user's text. Only a model with an OpenAI adapter (as its
primary or its fallback) has a transcriber: its key and base URL are the ones used,
so OpenAI settings alone never send audio anywhere. A transcription that fails is
logged and answered with None: the model then gets a marker, never an error.
"""

from __future__ import annotations

import logging
import mimetypes
from types import TracebackType
from typing import Self

from agent.llm.openai.model import OpenAIModel, describe, make_client

log = logging.getLogger(__name__)

NATIVE_MEDIA_ATTR = "native_media"
"""A model adapter's class attribute: the media kinds it takes as parts."""
_EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/m4a": "m4a",
    "audio/x-m4a": "m4a",
    "audio/aac": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
}


def adapters(model: object) -> list[object]:
    """The provider adapters behind ``model``: itself, or a wrapper's primary then
    fallback (``ResilientModel``)."""
    primary = getattr(model, "primary", None)
    if primary is None:
        return [model]
    fallback = getattr(model, "fallback", None)
    return adapters(primary) + (adapters(fallback) if fallback is not None else [])


def native_media(model: object) -> frozenset[str]:
    """The media kinds ``model`` takes as parts (a wrapper answers for its primary)."""
    inner = getattr(model, "primary", None)
    if inner is not None:
        return native_media(inner)
    kinds: object = getattr(model, NATIVE_MEDIA_ATTR, None)
    if not isinstance(kinds, frozenset | set):
        return frozenset()
    return frozenset(str(kind) for kind in kinds)


def file_name(mime: str) -> str:
    """A name whose extension tells the server the audio format (it reads the name)."""
    bare = mime.split(";")[0].strip().lower()
    ext = _EXTENSIONS.get(bare) or (mimetypes.guess_extension(bare) or ".ogg").lstrip(".")
    return f"voice.{ext}"


class Transcriber:
    """An ``AsyncOpenAI`` client for one job: turning voice notes into text."""

    def __init__(
        self, api_key: str, model: str, base_url: str | None = None, timeout: float = 120.0
    ) -> None:
        self.model = model
        self._secret = api_key
        # The SDK is imported already when the model is OpenAI (``warm``).
        self._client = make_client(api_key, base_url, timeout=timeout, max_retries=2)

    async def transcribe(self, data: bytes, mime: str) -> str | None:
        """The transcript of one voice note; None when the server could not make one."""
        import openai

        try:
            result = await self._client.audio.transcriptions.create(
                model=self.model,
                file=(file_name(mime), data, mime.split(";")[0].strip()),
                response_format="json",
            )
        except openai.OpenAIError as exc:
            detail = describe(exc) if isinstance(exc, openai.APIConnectionError) else str(exc)
            detail = detail.replace(self._secret, "***") if self._secret else detail
            log.warning("transcription failed (%s): %s", type(exc).__name__, detail[:300])
            return None
        text = getattr(result, "text", result if isinstance(result, str) else None)
        return text.strip() if isinstance(text, str) else None

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def transcriber_for(model: object, transcribe_model: str) -> Transcriber | None:
    """A transcriber on the endpoint of the first OpenAI adapter behind ``model`` (its
    key and base URL); None when no OpenAI client is configured, as for a Gemini-only
    setup or a test's scripted model."""
    for adapter in adapters(model):
        if isinstance(adapter, OpenAIModel):
            key, base_url = adapter.endpoint
            return Transcriber(key, transcribe_model, base_url=base_url)
    return None
