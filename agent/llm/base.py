"""The one interface every model adapter implements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from agent.llm.types import ModelMessage, ModelResponse, ToolSpec


class ModelError(Exception):
    """A model request failed.

    ``retryable`` is true for rate limits, server errors and timeouts; the
    message is for logs only and never shown to a user. ``reason``, when given,
    says in a few plain words what went wrong, for the apology the user gets
    (None: the model could not be reached). ``retry_after`` is the wait in seconds the
    provider asked for (``Retry-After``), when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


UNREADABLE = "my language model sent an answer I could not read"
"""``ModelError.reason`` for an answer that arrived but could not be used."""


def unexpected(
    provider: str, exc: BaseException, redact: Callable[[str], str] = lambda text: text
) -> ModelError:
    """A ``ModelError`` for anything an adapter or its SDK raised that it did not expect:
    a body that is not JSON (an HTML page with status 200 from a proxy: retryable), an
    answer nested past the JSON parser's limit (what the model wrote: not retried)..."""
    detail = redact(str(exc).splitlines()[0][:200]) if str(exc) else ""
    return ModelError(
        f"{provider}: unusable answer ({type(exc).__name__}: {detail})",
        retryable=not isinstance(exc, RecursionError),
        reason=UNREADABLE,
    )


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
