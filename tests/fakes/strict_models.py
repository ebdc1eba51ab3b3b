"""Model API fakes that check a request's tool traffic the way the real services do.

``StrictOpenAI`` refuses (400) a history whose assistant tool calls repeat an id or are
not each answered by exactly one ``tool`` message; ``StrictGemini`` refuses one whose
function-call turn is not followed by as many function responses, or whose call ids
repeat or are answered under other ids. Both can also answer with a raw body of any
content type (``raw``): an HTML error page with status 200, as a proxy in front of a
model server sometimes does.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.gemini_api import FakeGemini
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.scripted_server import Answer, Recorded

Json = dict[str, Any]
HTML_PAGE = (
    "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
)


@dataclass
class RawAnswer(Answer):
    """An answer sent verbatim with ``content_type`` (``body`` is the text)."""

    content_type: str = "text/html"


def openai_history_problem(body: Json) -> str | None:
    """What the real chat completions API would refuse in ``body``'s messages, if anything."""
    messages = body.get("messages", [])
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") or []
        if message.get("role") == "tool":
            return f"messages[{i}]: a 'tool' message must answer a preceding 'tool_calls'"
        if calls:
            ids = [c["id"] for c in calls]
            twice = [k for k, n in Counter(ids).items() if n > 1]
            if twice:
                return f"Duplicate value for 'tool_call_id' of {twice[0]} in messages[{i}]"
            answered: list[str] = []
            j = i + 1
            while j < len(messages) and messages[j].get("role") == "tool":
                answered.append(messages[j]["tool_call_id"])
                j += 1
            if sorted(answered) != sorted(ids):
                return (
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    f"responding to each 'tool_call_id' (messages[{i}])"
                )
            i = j
            continue
        i += 1
    return None


def gemini_history_problem(body: Json) -> str | None:
    """What the real Gemini API would refuse in ``body``'s contents, if anything."""
    contents = body.get("contents", [])
    for i, content in enumerate(contents):
        calls = [p["functionCall"] for p in content.get("parts", []) if "functionCall" in p]
        if not calls:
            continue
        following = contents[i + 1] if i + 1 < len(contents) else {"parts": []}
        responses = [
            p["functionResponse"] for p in following.get("parts", []) if "functionResponse" in p
        ]
        if len(responses) != len(calls):
            return (
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn."
            )
        ids = [c.get("id") for c in calls if c.get("id")]
        if len(ids) != len(set(ids)):
            return f"contents[{i}]: function call ids must be unique"
        answered = [r.get("id") for r in responses if r.get("id")]
        if ids and sorted(answered) != sorted(ids):
            return f"contents[{i + 1}]: function response ids do not match the calls"
    return None


class _Strict:
    """Mixed into a fake: raw answers, and the history check before scripted ones."""

    script: Any
    requests: list[Recorded]

    def problem(self, body: Json) -> str | None:
        raise NotImplementedError

    def refusal(self, problem: str) -> web.Response:
        raise NotImplementedError

    def raw(self, text: str = HTML_PAGE, content_type: str = "text/html") -> None:
        self.script.append(RawAnswer(200, text, content_type=content_type))

    async def check_then_answer(self, request: web.Request, answer: Any) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        problem = self.problem(body)
        if problem is not None:
            self.requests.append(
                Recorded(request.method, request.path, dict(request.headers), body)
            )
            return self.refusal(problem)
        if self.script and isinstance(self.script[0], RawAnswer):
            scripted = self.script.popleft()
            self.requests.append(
                Recorded(request.method, request.path, dict(request.headers), body)
            )
            return web.Response(
                status=scripted.status,
                body=scripted.body.encode(),
                content_type=scripted.content_type,
            )
        result: web.StreamResponse = await answer(request)
        return result


class StrictOpenAI(_Strict, FakeOpenAI):
    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._strict)

    async def _strict(self, request: web.Request) -> web.StreamResponse:
        return await self.check_then_answer(request, self.answer)

    def problem(self, body: Json) -> str | None:
        return openai_history_problem(body)

    def refusal(self, problem: str) -> web.Response:
        error = {"message": problem, "type": "invalid_request_error", "param": "messages"}
        return web.json_response({"error": {**error, "code": None}}, status=400)

    def reply_calls_with_ids(self, *calls: tuple[str, str, Json]) -> None:
        """One answer with these ``(id, name, arguments)`` tool calls, ids as given."""
        wire = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
        self.push(Answer(200, self.completion(None, wire)))


class StrictGemini(_Strict, FakeGemini):
    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{version}/models/{model}:generateContent", self._strict)

    async def _strict(self, request: web.Request) -> web.StreamResponse:
        return await self.check_then_answer(request, self.answer)

    def problem(self, body: Json) -> str | None:
        return gemini_history_problem(body)

    def refusal(self, problem: str) -> web.Response:
        error = {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}
        return web.json_response({"error": error}, status=400)

    def reply_calls_with_ids(self, *calls: tuple[str, str, Json]) -> None:
        """One answer with these ``(id, name, args)`` function calls, ids as given."""
        parts = [{"functionCall": {"id": i, "name": n, "args": a}} for i, n, a in calls]
        self.reply_parts(parts)
