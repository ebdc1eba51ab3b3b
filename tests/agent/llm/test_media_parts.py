"""Media parts through the real SDKs against the fakes: Gemini ``inlineData``, OpenAI
``image_url`` parts and transcripts, the retry with markers after a 400, storage."""

from __future__ import annotations

import pytest

from agent.llm.gemini import GeminiModel
from agent.llm.openai.model import OpenAIModel
from agent.llm.openai.wire import text_messages
from agent.llm.transcribe import Transcriber, file_name, native_media
from agent.llm.types import (
    MediaPart,
    MessagesAdapter,
    ModelMessage,
    TextPart,
    user_message,
    without_media,
)
from tests.agent.llm.llm_kit import GEMINI_KEY, OPENAI_KEY, SYSTEM
from tests.fakes.fixtures import gemini_api, openai_api
from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI, decode_data_url
from tests.fakes.scripted_server import Answer

__all__ = ["gemini_api", "openai_api"]  # fixtures, imported for pytest

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

JPEG = b"\xff\xd8\xff\xe0fake-jpeg-bytes"
OGG = b"OggS\x00fake-voice-note"


def photo(data: bytes | None = JPEG) -> MediaPart:
    return MediaPart(media_kind="image", mime="image/jpeg", file_id="f1", data=data)


def voice(data: bytes | None = OGG, transcript: str | None = None) -> MediaPart:
    return MediaPart(
        media_kind="audio",
        mime="audio/ogg; codecs=opus",
        file_id="f2",
        duration_s=42,
        transcript=transcript,
        data=data,
    )


def turn(*media: MediaPart, text: str = "what is this?") -> ModelMessage:
    return ModelMessage(role="user", parts=[TextPart(text=text), *media])


# -- the neutral part -------------------------------------------------------------
def test_bytes_are_never_dumped_and_old_histories_still_load() -> None:
    message = turn(photo(), voice(transcript="hi"))
    dumped = message.model_dump(mode="json", exclude_none=True)
    assert all("data" not in part for part in dumped["parts"])
    again = MessagesAdapter.validate_python([dumped])[0]
    assert again.media[0].data is None and again.media[1].transcript == "hi"
    stored_before = [
        {"role": "user", "parts": [{"kind": "text", "text": "hi"}]},
        {"role": "assistant", "parts": [{"kind": "tool_call", "id": "c1", "name": "x"}]},
        {"role": "tool", "parts": [{"kind": "tool_result", "call_id": "c1", "name": "x",
                                    "result": {}}]},
    ]  # fmt: skip
    assert [m.role for m in MessagesAdapter.validate_python(stored_before)] == [
        "user",
        "assistant",
        "tool",
    ]


def test_text_fallback_is_one_line_per_item() -> None:
    plain = without_media(turn(photo(), voice(), voice(transcript=" see you at 5 ")))
    assert plain.parts == [
        TextPart(
            text="what is this?\n[photo]\n[voice note, 0:42]\n"
            "[voice note, 0:42, transcript]: see you at 5"
        )
    ]
    assert without_media(turn(voice(transcript=""))).text.endswith(
        "[voice note, 0:42: no words in it]"
    )


def test_adapters_say_what_they_take() -> None:
    assert native_media(GeminiModel(GEMINI_KEY, "gemini-2.5-flash")) == {"image", "audio"}
    assert native_media(OpenAIModel(OPENAI_KEY, "gpt-4.1-mini")) == {"image"}
    assert native_media(object()) == frozenset()
    assert file_name("audio/ogg; codecs=opus") == "voice.ogg"
    assert file_name("audio/mpeg") == "voice.mp3"


# -- Gemini -----------------------------------------------------------------------
async def test_gemini_gets_photo_and_voice_note_inline(gemini_api: FakeGemini) -> None:
    model = GeminiModel(GEMINI_KEY, "gemini-2.5-flash", base_url=gemini_api.base_url)
    gemini_api.reply_text("A cat, and you said hello.")
    reply = await model.request(SYSTEM, [turn(photo(), voice())], [])
    await model.aclose()
    assert reply.message.text == "A cat, and you said hello."
    assert gemini_api.inline_data(0) == [("image/jpeg", JPEG), ("audio/ogg", OGG)]
    assert gemini_api.user_texts(0) == ["what is this?"]


async def test_gemini_400_for_media_retries_once_with_markers(gemini_api: FakeGemini) -> None:
    model = GeminiModel(GEMINI_KEY, "gemini-2.5-flash", base_url=gemini_api.base_url)
    gemini_api.reply_error(400, "Unsupported MIME type: audio/ogg")
    gemini_api.reply_text("I could not listen, sorry.")
    reply = await model.request(SYSTEM, [turn(voice())], [])
    await model.aclose()
    assert reply.message.text == "I could not listen, sorry."
    assert len(gemini_api.requests) == 2
    assert gemini_api.inline_data(1) == []
    assert gemini_api.user_texts(1) == ["what is this?\n[voice note, 0:42]"]


# -- OpenAI -----------------------------------------------------------------------
async def test_openai_gets_an_image_part_and_the_transcript_as_text(
    openai_api: FakeOpenAI,
) -> None:
    model = OpenAIModel(OPENAI_KEY, "gpt-4.1-mini", base_url=openai_api.base_url)
    openai_api.reply_text("ok")
    message = turn(photo(), voice(data=None, transcript="call me back"))
    await model.request(SYSTEM, [message], [])
    await model.aclose()
    [user] = [m for m in openai_api.bodies[0]["messages"] if m["role"] == "user"]
    assert user["content"][0] == {"type": "text", "text": "what is this?"}
    assert [decode_data_url(u) for u in openai_api.image_urls(0)] == [("image/jpeg", JPEG)]
    assert user["content"][2] == {
        "type": "text",
        "text": "[voice note, 0:42, transcript]: call me back",
    }


async def test_openai_never_gets_audio_bytes(openai_api: FakeOpenAI) -> None:
    model = OpenAIModel(OPENAI_KEY, "gpt-4.1-mini", base_url=openai_api.base_url)
    openai_api.reply_text("ok")
    await model.request(SYSTEM, [turn(voice())], [])
    await model.aclose()
    assert openai_api.bodies[0]["messages"][-1]["content"] == "what is this?\n[voice note, 0:42]"


async def test_openai_without_vision_gets_markers_after_one_400(openai_api: FakeOpenAI) -> None:
    """A local server whose model has no vision: the turn again with markers, and the
    model is not sent images again."""
    model = OpenAIModel(OPENAI_KEY, "llama3", base_url=openai_api.base_url)
    openai_api.reply_error(400, "llama3 does not support image input")
    openai_api.reply_text("I cannot see images, but I read your text.")
    reply = await model.request(SYSTEM, [turn(photo())], [])
    assert reply.message.text == "I cannot see images, but I read your text."
    assert len(openai_api.image_urls(0)) == 1 and openai_api.image_urls(1) == []
    assert openai_api.bodies[1]["messages"][-1]["content"] == "what is this?\n[photo]"
    openai_api.reply_text("again")
    await model.request(SYSTEM, [turn(photo())], [])
    await model.aclose()
    assert len(openai_api.requests) == 3 and openai_api.image_urls(2) == []


async def test_an_unexplained_400_is_retried_with_markers_but_not_remembered(
    openai_api: FakeOpenAI,
) -> None:
    model = OpenAIModel(OPENAI_KEY, "gpt-4.1-mini", base_url=openai_api.base_url)
    openai_api.reply_error(400, "Invalid request")
    openai_api.reply_text("fine")
    await model.request(SYSTEM, [turn(photo())], [])
    openai_api.reply_text("seen")
    await model.request(SYSTEM, [turn(photo())], [])
    await model.aclose()
    assert [len(openai_api.image_urls(i)) for i in range(3)] == [1, 0, 1]


async def test_a_400_without_media_is_not_retried(openai_api: FakeOpenAI) -> None:
    model = OpenAIModel(OPENAI_KEY, "gpt-4.1-mini", base_url=openai_api.base_url)
    openai_api.reply_error(400, "Invalid request")
    with pytest.raises(Exception, match="HTTP 400"):
        await model.request(SYSTEM, [user_message("hi")], [])
    await model.aclose()
    assert len(openai_api.requests) == 1


def test_text_mode_keeps_image_parts_when_merging_turns() -> None:
    out = text_messages(SYSTEM, [user_message("first"), turn(photo())])
    assert [p["type"] for p in out[1]["content"]] == ["text", "text", "image_url"]
    assert out[1]["content"][0] == {"type": "text", "text": "first"}
    assert (
        text_messages(SYSTEM, [turn(voice())])[1]["content"] == "what is this?\n[voice note, 0:42]"
    )


# -- transcription ----------------------------------------------------------------
async def test_transcriber_posts_the_file_and_returns_the_text(openai_api: FakeOpenAI) -> None:
    openai_api.transcripts.append("  Hello from the bus.  ")
    openai_api.transcripts.append(Answer(400, {"error": {"message": "unsupported format"}}))
    async with Transcriber(OPENAI_KEY, "gpt-4o-mini-transcribe", openai_api.base_url) as t:
        assert await t.transcribe(OGG, "audio/ogg; codecs=opus") == "Hello from the bus."
        assert await t.transcribe(OGG, "audio/ogg") is None
    first = openai_api.transcriptions[0]
    assert (first.model, first.filename, first.data) == ("gpt-4o-mini-transcribe", "voice.ogg", OGG)
    assert first.content_type == "audio/ogg"
