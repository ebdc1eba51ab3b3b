"""An in-process model driven by a function, for tests of the loop and the agent.

Like pydantic-ai's FunctionModel: the test decides each answer from what the
model would have been sent, and can inspect every request afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.llm.base import ModelError
from agent.llm.types import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolSpec,
    Usage,
)


@dataclass
class Request:
    system: str
    messages: list[ModelMessage]
    tools: list[ToolSpec]

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def read(self) -> str:
        """What the model reads beside the words: the system prompt, then the note on the
        newest message (the clock, the alert it is about: what changes per request)."""
        note = self.messages[-1].note if self.messages else ""
        return f"{self.system}\n{note}" if note else self.system


Responder = Callable[[Request], ModelMessage | str | Exception]


@dataclass
class ScriptedModel:
    responder: Responder
    name: str = "scripted"
    requests: list[Request] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        req = Request(system, list(messages), list(tools))
        self.requests.append(req)
        out = self.responder(req)
        if isinstance(out, Exception):
            raise out
        if isinstance(out, str):
            out = ModelMessage(role="assistant", parts=[TextPart(text=out)])
        return ModelResponse(message=out, usage=Usage(input_tokens=10, output_tokens=5))

    async def aclose(self) -> None:
        return None

    def call(self, name: str, **arguments: Any) -> ModelMessage:
        return ModelMessage(
            role="assistant",
            parts=[ToolCallPart(id=f"call_{next(self._ids)}", name=name, arguments=arguments)],
        )


def reply_text(text: str) -> Responder:
    return lambda _req: text


def sequence(*steps: ModelMessage | str | Exception) -> Responder:
    """Answer with each step in turn; the last one repeats."""
    it = iter(steps)
    last: list[ModelMessage | str | Exception] = []

    def respond(_req: Request) -> ModelMessage | str | Exception:
        with contextlib.suppress(StopIteration):
            last[:] = [next(it)]
        return last[0]

    return respond


def unavailable() -> ModelError:
    return ModelError("fake outage", retryable=True, status=503)
