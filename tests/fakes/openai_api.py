"""A fake OpenAI chat completions server (``POST /v1/chat/completions``).

Answers use the real wire shape: ``id``, ``object``, ``created``, ``model``,
``choices[0].message`` with ``content`` and ``tool_calls`` (arguments as a JSON
string), ``finish_reason`` and ``usage``. Errors use OpenAI's envelope
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from tests.fakes.scripted_server import Answer, ScriptedServer

Call = tuple[str, dict[str, Any] | str]
"""A scripted tool call: name and arguments (a dict, or a raw string sent verbatim)."""


class FakeOpenAI(ScriptedServer):
    def __init__(self, model: str = "gpt-fake") -> None:
        super().__init__()
        self.model = model
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` to the SDK (it appends ``/chat/completions``)."""
        return f"{self.url}/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.answer)

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

    # -- reading requests ---------------------------------------------------
    def tool_results(self, index: int) -> list[tuple[str, dict[str, Any]]]:
        """``(tool_call_id, parsed content)`` of each tool message in request ``index``."""
        return [
            (m["tool_call_id"], json.loads(m["content"]))
            for m in self.bodies[index]["messages"]
            if m["role"] == "tool"
        ]
