"""Reading a JSON object body without trusting it: size, time, shape and text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.webhook_body import BodyRefused, read_json_object


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async def handler(request: web.Request) -> web.Response:
        try:
            data = await read_json_object(request, limit=10_000, within=5)
        except BodyRefused as exc:
            return web.json_response({"error": exc.reason}, status=exc.status)
        return web.json_response({"got": data})

    application = web.Application()
    application.router.add_post("/", handler)
    async with TestClient(TestServer(application)) as test_client:
        yield test_client


async def answer(client: TestClient[Any, Any], body: bytes) -> tuple[int, Any]:
    resp = await client.post("/", data=body, headers={"Content-Type": "application/json"})
    return resp.status, await resp.json()


async def test_an_object_is_taken_with_its_text_made_storable(client: TestClient[Any, Any]) -> None:
    status, data = await answer(client, b'{"title": "disk \\ud83d full", "n": 1}')
    assert (status, data) == (200, {"got": {"title": "disk \ufffd full", "n": 1}})
    status, data = await answer(client, b'{"title": "caf\xe9"}')  # not UTF-8
    assert (status, data) == (200, {"got": {"title": "caf\ufffd"}})


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'"a string"', b"null", b"[" * 4_000 + b"]" * 4_000],
    ids=["not-json", "array", "string", "null", "deep"],
)
async def test_anything_but_an_object_is_a_clear_400(
    client: TestClient[Any, Any], body: bytes
) -> None:
    assert await answer(client, body) == (400, {"error": "body must be a JSON object"})


async def test_a_body_over_the_limit_is_413(client: TestClient[Any, Any]) -> None:
    status, data = await answer(client, b'{"x": "' + b"a" * 20_000 + b'"}')
    assert (status, data) == (413, {"error": "body over 10000 bytes"})
