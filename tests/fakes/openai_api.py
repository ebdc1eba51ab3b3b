"""A fake OpenAI chat completions server (``POST /v1/chat/completions``).

Answers use the real wire shape: ``id``, ``object``, ``created``, ``model``,
``choices[0].message`` with ``content`` and ``tool_calls`` (arguments as a JSON
string), ``finish_reason`` and ``usage``. Errors use OpenAI's envelope
``{"error": {"message", "type", "param", "code"}}``. A user message may carry photos
as ``image_url`` content parts (data URLs, read back with ``image_urls``).

``GET /v1/models`` lists ``models`` (the SDK's ``models.list``); a test may change it.

``POST /v1/audio/transcriptions`` takes the SDK's multipart form (``file``, ``model``,
``response_format``), records it in ``transcriptions`` and answers ``{"text": ...}``
from ``transcripts`` (queued) or ``default_transcript``.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agent.conversation.prompt import NOTE_HEAD
from tests.fakes.scripted_server import Answer, Recorded, ScriptedServer

Call = tuple[str, dict[str, Any] | str]
"""A scripted tool call: name and arguments (a dict, or a raw string sent verbatim)."""


def words_of(message: dict[str, Any]) -> str:
    """A chat completions message's text as its sender wrote it: its text parts without
    Watchkeeper's note (``agent.conversation.prompt.NOTE_HEAD``)."""
    content = message.get("content")
    if isinstance(content, str):  # text-mode tool calls: one string per message
        return content.split(f"\n{NOTE_HEAD}")[0]
    if not isinstance(content, list):
        return ""
    texts = [p["text"] for p in content if p.get("type") == "text"]
    return "\n".join(t for t in texts if not t.startswith(NOTE_HEAD))


@dataclass
class Transcription:
    """One ``/audio/transcriptions`` request as the fake got it."""

    model: str
    filename: str
    content_type: str
    data: bytes
    response_format: str


class FakeOpenAI(ScriptedServer):
    def __init__(self, model: str = "gpt-fake") -> None:
        super().__init__()
        self.model = model
        self._ids = itertools.count(1)
        self.transcriptions: list[Transcription] = []
        self.transcripts: deque[str | Answer] = deque()
        self.default_transcript = "(fake transcript)"
        self.models = [model, "gpt-4.1", "gpt-4.1-mini", "gpt-4o-mini-transcribe"]

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` to the SDK (it appends ``/chat/completions``)."""
        return f"{self.url}/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.answer)
        app.router.add_post("/v1/audio/transcriptions", self.transcribe)
        app.router.add_get("/v1/models", self.list_models)

    async def list_models(self, request: web.Request) -> web.Response:
        self.requests.append(Recorded(request.method, request.path, dict(request.headers), {}))
        data = [
            {"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
            for m in self.models
        ]
        return web.json_response({"object": "list", "data": data})

    async def transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response(
                {"error": {"message": "file is required", "type": "invalid_request_error"}},
                status=400,
            )
        self.transcriptions.append(
            Transcription(
                model=str(form.get("model", "")),
                filename=upload.filename,
                content_type=upload.content_type,
                data=upload.file.read(),
                response_format=str(form.get("response_format", "json")),
            )
        )
        scripted = self.transcripts.popleft() if self.transcripts else self.default_transcript
        if isinstance(scripted, Answer):
            return web.json_response(scripted.body, status=scripted.status)
        return web.json_response({"text": scripted})

    def completion(
        self,
        content: str | None,
        tool_calls: list[dict[str, Any]] | None = None,
        usage: tuple[int, int] = (11, 7),
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 1_760_000_000,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            },
        }

    def empty_answer(self) -> dict[str, Any]:
        return self.completion("")

    def last_words(self, index: int) -> str:
        """The newest message of request ``index`` as its sender wrote it: its text
        parts without Watchkeeper's note (``agent.conversation.prompt.NOTE_HEAD``)."""
        return words_of(self.bodies[index]["messages"][-1])

    def reply_text(self, text: str, usage: tuple[int, int] = (11, 7)) -> None:
        self.push(Answer(200, self.completion(text, usage=usage)))

    def reply_tool_calls(self, *calls: Call, content: str | None = None) -> None:
        wire = [
            {
                "id": f"call_fake_{next(self._ids)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for name, args in calls
        ]
        self.push(Answer(200, self.completion(content, wire)))

    def reply_error(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        times: int = 1,
        always: bool = False,
    ) -> None:
        answer = Answer(
            status, {"error": {"message": message, "type": type_, "param": None, "code": code}}
        )
        if always:
            self.default = answer
        else:
            self.push(answer, times)

    def rate_limit(self, times: int, retry_after: str | None = "1") -> None:
        """The next ``times`` requests get OpenAI's 429 with ``Retry-After`` (if given)."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        body = {
            "error": {
                "message": "Rate limit reached for requests",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
        self.push(Answer(429, body, headers=headers), times)

    # -- reading requests ---------------------------------------------------
    def tool_results(self, index: int) -> list[tuple[str, dict[str, Any]]]:
        """``(tool_call_id, parsed content)`` of each tool message in request ``index``."""
        return [
            (m["tool_call_id"], json.loads(m["content"]))
            for m in self.bodies[index]["messages"]
            if m["role"] == "tool"
        ]

    def image_urls(self, index: int) -> list[str]:
        """Every ``image_url`` URL in the user messages of request ``index``."""
        return [
            part["image_url"]["url"]
            for m in self.bodies[index]["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for part in m["content"]
            if part.get("type") == "image_url"
        ]

    def user_text(self, index: int) -> str:
        """All user text of request ``index`` (string contents and text parts), joined."""
        chunks: list[str] = []
        for m in self.bodies[index]["messages"]:
            if m["role"] != "user":
                continue
            content = m["content"]
            if isinstance(content, str):
                chunks.append(content)
            else:
                chunks += [p["text"] for p in content if p.get("type") == "text"]
        return "\n".join(chunks)


def decode_data_url(url: str) -> tuple[str, bytes]:
    """``data:<mime>;base64,<data>`` → (mime, bytes)."""
    head, _, data = url.partition(",")
    assert head.startswith("data:") and head.endswith(";base64"), url[:60]
    return head[5:-7], base64.b64decode(data)
