"""A provider SDK imported on first need, in a thread: never on the event loop.

The OpenAI SDK is several hundred modules (the pydantic models of every API it
covers, about 13 MiB resident, 0.3-1 s to import): a command that may never call the
model does not load it. ``watchkeeper run`` starts loading it once it serves, the first
message read or exchange does if that comes first (``warm``), and a request awaits the
same import instead of blocking the loop on it.
"""

from __future__ import annotations

import asyncio
import importlib
import logging

log = logging.getLogger(__name__)


class LazyImport:
    """``await ready()`` imports ``module`` once, in a thread; later calls are free."""

    def __init__(self, module: str) -> None:
        self.module = module
        self._loading: asyncio.Future[object] | None = None

    async def ready(self) -> None:
        loading = self._loading
        if loading is None:
            loading = self._loading = asyncio.ensure_future(self._load())
        if not loading.done():
            await asyncio.shield(loading)
        else:
            loading.result()  # an import that failed says so again

    async def _load(self) -> object:
        return await asyncio.to_thread(importlib.import_module, self.module)

    def cancel(self) -> None:
        """Stop waiting for an import under way (the thread still finishes it)."""
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()


async def warm_model(model: object) -> None:
    """Load the SDKs behind ``model`` (its ``warm``, if any); a failure is only logged,
    as the request that needs the SDK meets it again and reports it."""
    warm = getattr(model, "warm", None)
    if warm is None:
        return
    try:
        await warm()
    except Exception:  # the first request meets the same failure and reports it
        log.warning("loading the model's SDK failed", exc_info=True)
