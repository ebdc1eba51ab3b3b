"""A scriptable HTTP server on 127.0.0.1 for faking model APIs.

The test queues answers (JSON bodies or error statuses) and reads the recorded
requests afterwards. When the queue is empty the ``default`` answer is used; with
no default the server answers 400 "script exhausted", which no adapter retries,
so a test that under-scripts fails loudly instead of hanging in retries.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from aiohttp.test_utils import TestServer


@dataclass
class Recorded:
    """One request as the fake saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Answer:
    """One scripted answer: a status and a JSON (or raw text) body, after an optional delay,
    with optional extra response headers (``Retry-After``...)."""

    status: int = 200
    body: Any = field(default_factory=dict)
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class ScriptedServer:
    """Base of the fakes: routes are added by subclasses in ``routes``."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: deque[Answer] = deque()
        self.default: Answer | None = None
        self._server: TestServer | None = None
        self.in_flight = 0
        self.peak = 0
        """Most requests being answered at once (a delayed answer counts while it waits)."""

    # -- scripting ---------------------------------------------------------
    def push(self, answer: Answer, times: int = 1) -> None:
        for _ in range(times):
            self.script.append(answer)

    def hang(self, seconds: float) -> None:
        """The next request waits ``seconds`` before a 200 answer (to test timeouts)."""
        self.push(Answer(200, self.empty_answer(), delay=seconds))

    def empty_answer(self) -> dict[str, Any]:
        return {}

    # -- inspection --------------------------------------------------------
    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    @property
    def url(self) -> str:
        assert self._server is not None, "fake not started"
        return str(self._server.make_url("")).rstrip("/")

    # -- lifecycle ---------------------------------------------------------
    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._server = TestServer(app, host="127.0.0.1", port=0)
        await self._server.start_server()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else {}
        self.requests.append(Recorded(request.method, request.path, dict(request.headers), body))
        scripted = self.script.popleft() if self.script else self.default
        if scripted is None:
            scripted = Answer(400, {"error": {"message": "fake: script exhausted"}})
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if scripted.delay:
                await asyncio.sleep(scripted.delay)
        finally:
            self.in_flight -= 1
        if isinstance(scripted.body, str):
            return web.Response(
                status=scripted.status, text=scripted.body, headers=scripted.headers
            )
        return web.json_response(scripted.body, status=scripted.status, headers=scripted.headers)
