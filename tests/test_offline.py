"""The test suite cannot reach the internet, on Python's sockets and on the app's loop."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
import uvloop

from tests.offline import BlockedNetwork

OUTSIDE = "93.184.216.34"


def test_a_socket_cannot_dial_out() -> None:
    with pytest.raises(BlockedNetwork):
        socket.create_connection((OUTSIDE, 80), timeout=1)


def test_a_name_cannot_be_resolved() -> None:
    with pytest.raises(BlockedNetwork):
        socket.getaddrinfo("example.com", 443)


async def test_async_tests_run_on_the_apps_loop() -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


async def test_the_loop_cannot_dial_out() -> None:
    with pytest.raises(BlockedNetwork):
        await asyncio.open_connection(OUTSIDE, 80)
    with pytest.raises(BlockedNetwork):
        await asyncio.open_connection("example.com", 80)


async def test_the_loop_cannot_resolve_a_name() -> None:
    with pytest.raises(BlockedNetwork):
        await asyncio.get_running_loop().getaddrinfo("example.com", 443)


async def test_the_loop_cannot_connect_a_socket_out() -> None:
    sock = socket.socket()
    sock.setblocking(False)
    with sock, pytest.raises(BlockedNetwork):
        await asyncio.get_running_loop().sock_connect(sock, (OUTSIDE, 80))


async def test_an_http_client_fails_at_once() -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(BlockedNetwork):
            async with asyncio.timeout(5):
                await session.get("http://example.com/")


async def test_the_loop_still_reaches_loopback() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        for host in ("127.0.0.1", "localhost"):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"hi\n")
            assert await reader.readline() == b"hi\n"
            writer.close()
