"""Tests never reach the internet: any attempt fails at once with ``BlockedNetwork``.

Two doors are guarded. Python's own sockets (``socket.connect``, ``getaddrinfo``) cover
sync code and asyncio's own loop. uvloop, which the app and every async test run on
(``runtime.loop.run``), resolves and connects in libuv without touching those, so
``OfflineLoop`` checks the address at the loop's own entry points before libuv sees it.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import uvloop


class BlockedNetwork(RuntimeError):
    pass


def _is_local(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return True  # AF_UNIX paths and the like
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check_address(address: Any) -> None:
    if isinstance(address, tuple) and not _is_local(address[0]):
        raise BlockedNetwork(f"test tried to reach {address[0]}: tests must stay offline")


def _check_name(host: Any) -> None:
    if host is not None and not _is_local(host):
        name = host.decode(errors="replace") if isinstance(host, bytes) else host
        raise BlockedNetwork(f"test tried to resolve {name}: tests must stay offline")


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    _check_address(address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> Any:
    _check_address(address)
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    _check_name(host)
    return _real_getaddrinfo(host, *args, **kwargs)


def block_the_internet() -> None:
    """Guard Python's own sockets for the rest of the process."""
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo


class OfflineLoop(uvloop.Loop):  # type: ignore[misc]
    """uvloop, refusing non-loopback names and addresses before libuv resolves or dials."""

    async def getaddrinfo(self, host: Any, port: Any, **kwargs: Any) -> Any:
        _check_name(host)
        return await super().getaddrinfo(host, port, **kwargs)

    async def create_connection(  # type: ignore[override]
        self, protocol_factory: Any, host: Any = None, port: Any = None, **kwargs: Any
    ) -> Any:
        _check_name(host)  # a connected ``sock`` passed instead went through socket.connect
        return await super().create_connection(protocol_factory, host, port, **kwargs)

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        _check_address(address)
        await super().sock_connect(sock, address)

    async def create_datagram_endpoint(  # type: ignore[override]
        self, protocol_factory: Any, local_addr: Any = None, remote_addr: Any = None, **kwargs: Any
    ) -> Any:
        _check_address(remote_addr)
        return await super().create_datagram_endpoint(
            protocol_factory, local_addr, remote_addr, **kwargs
        )
