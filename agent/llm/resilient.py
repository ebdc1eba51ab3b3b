"""Retries with backoff, then a fallback provider: one policy for every adapter.

Adapters never retry themselves; they classify failures as retryable (rate
limits, server errors, timeouts) or not. Here a retryable failure is retried after
a wait from ``MODEL_BACKOFF`` (the project's one policy and loop helper,
``runtime.backoff``: never sooner than a ``Retry-After`` asked); once a
provider gives up (or fails in a way retrying cannot fix), the fallback provider
gets its turn under the same policy.

Every call takes a turn from its provider's ``AdaptiveLimit`` (``agent.llm.limiter``),
shared by chats and scheduled runs: a 429 or 503 halves that provider's limit and its
``Retry-After`` pauses it. A rate limit (429) is the provider asking us to wait, not a
failure: it is retried after the wait it asked for without using up ``retries``, for
up to ``patience`` seconds of waiting, so a burst is slowed down, never dropped.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from agent.llm.base import ModelClient, ModelError
from agent.llm.lazy_sdk import warm_model
from agent.llm.limiter import OVERLOAD_STATUSES, AdaptiveLimit
from agent.llm.types import ModelMessage, ModelResponse, ToolSpec
from runtime.backoff import Backoff, Draw, Pauses

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[object]]
RATE_LIMITED = 429
MIN_WAIT = 0.1
"""Shortest wait after a 429, even one saying ``Retry-After: 0``."""
MODEL_BACKOFF = Backoff(first=0.5, cap=8.0, jitter=0.5, retries=3)
"""Waits between tries of one provider: 0.5 s doubling to 8 s, half of each random;
3 retries after the first try (429s aside)."""


class ResilientModel:
    """A ``ModelClient`` that wraps a primary and an optional fallback.

    ``backoff.retries`` counts extra attempts after the first, per provider: with
    ``MODEL_BACKOFF`` a persistently failing provider is asked 4 times (429s aside).
    ``max_concurrent`` is the ceiling of each provider's adaptive limit.
    """

    def __init__(
        self,
        primary: ModelClient,
        fallback: ModelClient | None = None,
        backoff: Backoff = MODEL_BACKOFF,
        sleep: Sleep = asyncio.sleep,
        draw: Draw = random.random,
        *,
        max_concurrent: int = 100,
        patience: float = 120.0,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name
        self.limits = {primary.name: AdaptiveLimit(primary.name, max_concurrent)}
        if fallback is not None:
            self.limits.setdefault(fallback.name, AdaptiveLimit(fallback.name, max_concurrent))
        self._patience = patience
        self._backoff = backoff
        self._sleep = sleep
        self._draw = draw

    async def request(
        self, system: str, messages: list[ModelMessage], tools: list[ToolSpec]
    ) -> ModelResponse:
        """The primary's answer, retried under the policy; then the fallback's, under the
        same policy, once the primary gives up. One loop, in this one function: the
        request waits in no wrapper of ours on its way to the adapter."""
        client = self.primary
        limit = self.limits[client.name]
        # The one loop helper (``runtime.backoff.Pauses``): retryable failures, counted
        # against ``retries``; 429s apart, bounded by ``patience`` seconds of waiting.
        failures = Pauses(self._backoff, sleep=self._sleep, draw=self._draw)
        limited = Pauses(self._backoff, sleep=self._sleep, draw=self._draw)
        waited = 0.0
        while True:
            slot = limit.take() or await limit.wait()  # a free turn at once, else in line
            try:
                return await client.request(system, messages, tools)
            except ModelError as exc:
                if exc.status in OVERLOAD_STATUSES:
                    slot.overloaded(exc.retry_after)
                else:
                    slot.neutral()
                error = exc
            except BaseException:
                slot.neutral()  # cancelled, or an error no adapter classified
                raise
            finally:
                limit.release(slot)
            asked = error.retry_after
            if error.retryable and error.status == RATE_LIMITED:
                floor = max(asked, MIN_WAIT) if asked is not None else None
                wait = max(limited.upcoming, floor or 0.0)
                if waited + wait <= self._patience:
                    log.warning(
                        "provider %s rate limited us; retry in %.2fs (%.0fs waited so far)",
                        client.name,
                        wait,
                        waited,
                    )
                    waited += await limited.sleep(floor)
                    continue
            if not error.retryable or failures.exhausted:
                log.warning(
                    "provider %s gave up after %d attempt(s) (status %s, retryable %s): %s",
                    client.name,
                    failures.failures + limited.failures + 1,
                    error.status,
                    error.retryable,
                    error,
                )
                if client is not self.primary or self.fallback is None:
                    raise error
                log.warning(
                    "provider %s failed (status %s): falling back to %s",
                    client.name,
                    error.status,
                    self.fallback.name,
                )
                client = self.fallback
                limit = self.limits[client.name]
                failures.reset()
                limited.reset()
                waited = 0.0
                continue
            wait = max(failures.upcoming, min(asked, limit.max_pause) if asked else 0.0)
            log.warning(
                "provider %s failed (status %s); retry %d/%s in %.2fs",
                client.name,
                error.status,
                failures.failures + 1,
                self._backoff.retries,
                wait,
            )
            await failures.sleep(min(asked, limit.max_pause) if asked else None)

    async def warm(self) -> None:
        """Load the adapters' SDKs now rather than in the first request."""
        for model in (self.primary, self.fallback):
            await warm_model(model)

    async def aclose(self) -> None:
        await self.primary.aclose()
        if self.fallback is not None:
            await self.fallback.aclose()
