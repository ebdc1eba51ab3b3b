"""A cap on the HTTP server's open connections, so inbound clients can never take every
file descriptor the process has: the database, Telegram and Twilio need theirs too.

``ConnectionCap`` sits between the listening socket and aiohttp's low-level server (a
protocol factory, as aiohttp documents for ``loop.create_server``):

1. At most ``per_peer`` connections from one address (a /64 for IPv6): past that, a
   new one gets a short ``503`` with ``Retry-After`` and is closed at once.
2. At most ``most`` in all. At the cap, the address holding the most connections
   gives up its oldest one to a newcomer from an address holding fewer, so a flood
   spread over many addresses still leaves room for the owner's monitors and the
   webhooks; when no address holds more than the newcomer's would, it gets the 503.

``TRUSTED_PROXIES`` are exempt from the per-address rules (a proxy carries many
clients; its connections are neither refused for their number nor given up), not
from the total; a proxy left out of that setting (on loopback, say) shares
``per_peer`` among all its clients.

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

from agent.app.access import Network, client_key, in_networks
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
        self._by_peer: dict[str, dict[_Counted, None]] = {}
        """Per address, its open connections, the oldest first (exempt ones not here)."""
        self._warn = Throttled(log)

    def __call__(self) -> asyncio.Protocol:
        return _Counted(self)

    def _admit(self, conn: _Counted, peer: str | None) -> bool:
        """Count ``conn`` (from ``peer``) in, making room if it is owed some; False when
        it is to be refused."""
        key = None if self._is_exempt(peer) else client_key(peer, (), ())
        held = len(self._by_peer.get(key, ())) if key is not None else 0
        if held >= self.per_peer:
            self._warn.warning("http: %d connections from one address; refusing more", held)
            return False
        if self.open >= self.most and not self._make_room(held):
            self._warn.warning("http: %d connections open; refusing new ones", self.open)
            return False
        self.open += 1
        conn.key = key
        if key is not None:
            self._by_peer.setdefault(key, {})[conn] = None
        return True

    def _make_room(self, held: int) -> bool:
        """Close the oldest connection of the address holding the most, if it holds
        more than the newcomer's address would."""
        if not self._by_peer:
            return False
        heaviest = max(self._by_peer.values(), key=len)
        if len(heaviest) <= held + 1:
            return False
        next(iter(heaviest)).give_up()
        return True

    def _closed(self, conn: _Counted) -> None:
        self.open -= 1
        if conn.key is not None:
            mine = self._by_peer[conn.key]
            del mine[conn]
            if not mine:
                del self._by_peer[conn.key]

    def _is_exempt(self, peer: str | None) -> bool:
        try:
            address = ip_address(peer or "")
        except ValueError:
            return False
        return in_networks(address, self._exempt)


class _Counted(asyncio.Protocol):
    """One connection: refused at once, or handed to aiohttp's handler and counted
    until it closes. Every protocol call goes to the handler unchanged."""

    def __init__(self, cap: ConnectionCap) -> None:
        self._cap = cap
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._counted = False
        self.key: str | None = None
        """Its address's key in the cap's table; None when exempt."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else None
        if not self._cap._admit(self, host):
            # A stream transport (uvloop's do not subclass asyncio's, hence no isinstance).
            cast(asyncio.WriteTransport, transport).write(REFUSAL)
            transport.close()
            return
        self._counted = True
        self._transport = transport
        self._inner = self._cap._server()
        self._inner.connection_made(transport)

    def give_up(self) -> None:
        """Closed to make room: counted out now, not when the close completes."""
        self._uncount()
        if self._transport is not None:
            self._transport.close()

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._cap._closed(self)

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
        self._uncount()
        inner, self._inner, self._transport = self._inner, None, None
        if inner is not None:
            inner.connection_lost(exc)
