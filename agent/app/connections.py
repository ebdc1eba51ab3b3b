"""A cap on the HTTP server's open connections, so inbound clients can never take every
file descriptor the process has: the database, Telegram and Twilio need theirs too.

``ConnectionCap`` sits between the listening socket and aiohttp's low-level server (a
protocol factory, as aiohttp documents for ``loop.create_server``). Over ``most``
connections in all, or ``per_peer`` from one address (a /64 for IPv6), a new
connection gets a short ``503`` with ``Retry-After`` and is closed at once; those
already open are served as before. ``TRUSTED_PROXIES`` are exempt from the
per-address part (a proxy carries many clients), not from the total; a proxy left out
of that setting (on loopback, say) shares ``per_peer`` among all its clients.

Slow clients cannot hold their slots for long: headers must arrive within
``HTTP_READ_TIMEOUT_SECONDS``, and so must a body (``agent.app.http``). Per-address
limits finer than this belong to a reverse proxy in front.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable, Sequence
from ipaddress import ip_address
from typing import cast

from agent.app.client_address import Network, client_key
from channels.webhook_body import Throttled

log = logging.getLogger(__name__)
MOST = 4096
"""Open connections at most, however many descriptors the process may have."""
FEWEST = 64
PER_PEER = 100
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 21\r\n\r\ntoo many connections\n"
)


def default_most() -> int:
    """Half the process's descriptor limit (the rest stays for outbound connections,
    the database and files), between ``FEWEST`` and ``MOST``: 512 under systemd's
    default of 1,024."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MOST
    return max(FEWEST, min(MOST, soft // 2))


class ConnectionCap:
    """The protocol factory to serve ``server`` (aiohttp's) through, capped."""

    def __init__(
        self,
        server: Callable[[], asyncio.Protocol],
        *,
        most: int,
        per_peer: int = PER_PEER,
        exempt: Sequence[Network] = (),
    ) -> None:
        self._server = server
        self.most = most
        self.per_peer = per_peer
        self._exempt = tuple(exempt)
        self.open = 0
        self._by_peer: dict[str, int] = {}
        self._warn = Throttled(log)

    def __call__(self) -> asyncio.Protocol:
        return _Counted(self)

    def _admit(self, peer: str | None) -> tuple[bool, str | None]:
        """Whether a connection from ``peer`` may be served, and its per-address key
        (None when exempt)."""
        if self.open >= self.most:
            self._warn.warning("http: %d connections open; refusing new ones", self.open)
            return False, None
        key = None if self._is_exempt(peer) else client_key(peer, (), ())
        if key is not None and self._by_peer.get(key, 0) >= self.per_peer:
            self._warn.warning(
                "http: %d connections from one address; refusing more", self.per_peer
            )
            return False, None
        self.open += 1
        if key is not None:
            self._by_peer[key] = self._by_peer.get(key, 0) + 1
        return True, key

    def _closed(self, key: str | None) -> None:
        self.open -= 1
        if key is not None:
            left = self._by_peer.pop(key) - 1
            if left:
                self._by_peer[key] = left

    def _is_exempt(self, peer: str | None) -> bool:
        try:
            address = ip_address(peer or "")
        except ValueError:
            return False
        return any(address.version == net.version and address in net for net in self._exempt)


class _Counted(asyncio.Protocol):
    """One connection: refused at once, or handed to aiohttp's handler and counted
    until it closes. Every protocol call goes to the handler unchanged."""

    def __init__(self, cap: ConnectionCap) -> None:
        self._cap = cap
        self._inner: asyncio.Protocol | None = None
        self._key: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else None
        admitted, self._key = self._cap._admit(host)
        if not admitted:
            # A stream transport (uvloop's do not subclass asyncio's, hence no isinstance).
            cast(asyncio.WriteTransport, transport).write(REFUSAL)
            transport.close()
            return
        self._inner = self._cap._server()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is None:
            return
        inner, self._inner = self._inner, None
        self._cap._closed(self._key)
        inner.connection_lost(exc)
