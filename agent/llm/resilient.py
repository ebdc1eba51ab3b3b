"""Retries with backoff, then a fallback provider: one policy for every adapter.

Adapters never retry themselves; they classify failures as retryable (rate
limits, server errors, timeouts) or not. Here a retryable failure is retried
with exponential backoff and jitter; once a provider gives up (or fails in a way
retrying cannot fix), the fallback provider gets its turn under the same policy.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from agent.llm.base import ModelClient, ModelError
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[object]]


class ResilientModel:
    """A ``ModelClient`` that wraps a primary and an optional fallback.

    ``retries`` counts extra attempts after the first, per provider: with the
    default of 3 a persistently failing provider is asked 4 times.
    """

    def __init__(
        self,
        primary: ModelClient,
        fallback: ModelClient | None = None,
        retries: int = 3,
        base_delay: float = 0.5,
        max_delay: float = 8.0,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name
        self._retries = max(0, retries)
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._sleep = sleep
        self._jitter = jitter

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        try:
            return await self._with_retries(self.primary, system, messages, tools)
        except ModelError as exc:
            if self.fallback is None:
                raise
            log.warning(
                "provider %s failed (status %s): falling back to %s",
                self.primary.name,
                exc.status,
                self.fallback.name,
            )
        return await self._with_retries(self.fallback, system, messages, tools)

    async def aclose(self) -> None:
        await self.primary.aclose()
        if self.fallback is not None:
            await self.fallback.aclose()

    def delay(self, attempt: int) -> float:
        """Backoff before retry ``attempt`` (1-based): doubling, capped, half of it random."""
        ceiling = min(self._max_delay, self._base_delay * 2.0 ** (attempt - 1))
        return ceiling / 2 + self._jitter() * ceiling / 2

    async def _with_retries(
        self,
        client: ModelClient,
        system: str,
        messages: list[ModelMessage],
        tools: list[ToolSpec],
    ) -> ModelResponse:
        attempt = 0
        while True:
            try:
                return await client.request(system, messages, tools)
            except ModelError as exc:
                if not exc.retryable or attempt >= self._retries:
                    log.warning(
                        "provider %s gave up after %d attempt(s) (status %s, retryable %s): %s",
                        client.name,
                        attempt + 1,
                        exc.status,
                        exc.retryable,
                        exc,
                    )
                    raise
                attempt += 1
                wait = self.delay(attempt)
                log.warning(
                    "provider %s failed (status %s); retry %d/%d in %.2fs",
                    client.name,
                    exc.status,
                    attempt,
                    self._retries,
                    wait,
                )
                await self._sleep(wait)
