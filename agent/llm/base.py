"""The one interface every model adapter implements."""

from __future__ import annotations

from typing import Protocol

from agent.llm.types import ModelMessage, ModelResponse, ToolSpec


class ModelError(Exception):
    """A model request failed.

    ``retryable`` is true for rate limits, server errors and timeouts; the
    message is for logs only and never shown to a user.
    """

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ModelClient(Protocol):
    """A chat model with function calling.

    ``request`` sends the system prompt, the history and the tool specs, and
    returns the assistant's next message (text and/or tool calls). Adapters map
    our neutral parts to their wire format and back; the loop never branches on
    the provider.
    """

    name: str

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse: ...

    async def aclose(self) -> None: ...
