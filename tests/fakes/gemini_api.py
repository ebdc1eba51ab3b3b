"""A fake Gemini API (``POST /{version}/models/{model}:generateContent``).

Answers use the real wire shape: ``candidates[0].content.parts`` holding
``text`` or ``functionCall`` parts (optionally with ``thoughtSignature``, base64),
``finishReason``, ``usageMetadata`` and ``modelVersion``. Errors use Google's
envelope ``{"error": {"code", "message", "status"}}``. Requests may carry photos and
voice notes as ``inlineData`` parts (``mimeType`` and base64 ``data``), read back
with ``inline_data``. ``GET /{version}/models`` lists ``models`` (the SDK's
``models.list``), in pages of ``pageSize``.
"""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from agent.conversation.prompt import NOTE_HEAD
from tests.fakes.scripted_server import Answer, ScriptedServer

Call = tuple[str, dict[str, Any]]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode_any(text: str) -> bytes:
    """Base64 in either alphabet, as proto JSON accepts it (the SDK sends URL-safe)."""
    return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)


class FakeGemini(ScriptedServer):
    def __init__(self, model_version: str = "gemini-fake-001") -> None:
        super().__init__()
        self.model_version = model_version
        self.models = ["gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.0-flash", model_version]

    @property
    def base_url(self) -> str:
        """What to pass as ``HttpOptions(base_url=...)``; the SDK adds the version."""
        return self.url + "/"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{version}/models/{model}:generateContent", self.answer)
        app.router.add_get("/{version}/models", self.list_models)

    async def list_models(self, request: web.Request) -> web.Response:
        size = int(request.query.get("pageSize", "50"))
        start = int(request.query.get("pageToken") or 0)
        page = [
            {
                "name": f"models/{m}",
                "displayName": m,
                "supportedGenerationMethods": ["generateContent"],
            }
            for m in self.models[start : start + size]
        ]
        body: dict[str, Any] = {"models": page}
        if start + size < len(self.models):
            body["nextPageToken"] = str(start + size)
        return web.json_response(body)

    def answer_body(self, parts: list[dict[str, Any]], finish: str = "STOP") -> dict[str, Any]:
        return {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 13,
                "candidatesTokenCount": 5,
                "totalTokenCount": 18,
            },
            "modelVersion": self.model_version,
        }

    def empty_answer(self) -> dict[str, Any]:
        return self.answer_body([{"text": ""}])

    def reply_parts(self, parts: list[dict[str, Any]], finish: str = "STOP") -> None:
        self.push(Answer(200, self.answer_body(parts, finish)))

    def reply_text(self, text: str, signature: bytes | None = None) -> None:
        part: dict[str, Any] = {"text": text}
        if signature is not None:
            part["thoughtSignature"] = b64(signature)
        self.reply_parts([part])

    def reply_calls(self, *calls: Call, signature: bytes | None = None, ids: bool = False) -> None:
        """Function calls in one answer; like Gemini, only the first part carries the signature."""
        parts: list[dict[str, Any]] = []
        for n, (name, args) in enumerate(calls):
            call: dict[str, Any] = {"name": name, "args": args}
            if ids:
                call["id"] = f"gem-{len(self.script)}-{n}"
            part: dict[str, Any] = {"functionCall": call}
            if signature is not None and n == 0:
                part["thoughtSignature"] = b64(signature)
            parts.append(part)
        self.reply_parts(parts)

    def reply_error(
        self, status: int, message: str, *, times: int = 1, always: bool = False
    ) -> None:
        answer = Answer(
            status,
            {"error": {"code": status, "message": message, "status": _STATUS.get(status, "")}},
        )
        if always:
            self.default = answer
        else:
            self.push(answer, times)

    def rate_limit(self, times: int, retry_delay: str = "1s") -> None:
        """The next ``times`` requests get Gemini's 429 RESOURCE_EXHAUSTED, whose wait is
        in the body (``RetryInfo.retryDelay``), as the real API sends it."""
        retry_info = {
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": retry_delay,
        }
        body = {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [retry_info],
            }
        }
        self.push(Answer(429, body), times)

    # -- reading requests ---------------------------------------------------
    def function_responses(self, index: int) -> list[dict[str, Any]]:
        """Every ``functionResponse`` object sent in request ``index``, in order."""
        return [
            part["functionResponse"]
            for content in self.bodies[index]["contents"]
            for part in content["parts"]
            if "functionResponse" in part
        ]

    def inline_data(self, index: int) -> list[tuple[str, bytes]]:
        """``(mimeType, decoded bytes)`` of every ``inlineData`` part in request ``index``.

        Like Google's proto JSON parser, both field spellings are read: the SDK sends
        ``mime_type`` inside ``inlineData``, REST examples write ``mimeType``."""
        found: list[tuple[str, bytes]] = []
        for content in self.bodies[index]["contents"]:
            for part in content["parts"]:
                blob = part.get("inlineData", part.get("inline_data"))
                if blob is not None:
                    mime = blob.get("mimeType", blob.get("mime_type"))
                    found.append((mime, b64decode_any(blob["data"])))
        return found

    def user_texts(self, index: int) -> list[str]:
        """The text parts of the user contents of request ``index``, in order, without
        Watchkeeper's note (``agent.conversation.prompt.NOTE_HEAD``)."""
        return [
            part["text"]
            for content in self.bodies[index]["contents"]
            if content.get("role") == "user"
            for part in content["parts"]
            if "text" in part and not part["text"].startswith(NOTE_HEAD)
        ]
