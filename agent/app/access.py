"""Who may use the admin endpoints (``/api/*``, the dashboard): the admin token's gate,
the per-client throttle on wrong tokens, and who a request comes from.

Every place that compares a token the client sent with ``ADMIN_TOKEN`` (a bearer
header on ``/api/*`` or a dashboard page, the ``POST /login`` form) goes through
``AdminGate``: a held client gets ``TooManyTries`` (answered 429 with ``Retry-After``
by ``agent.app.http``) before its token is looked at, the right one included. Checking
it anyway would tell a guesser at full speed which guess is right, and the throttle
would hold nobody back; the owner is held only by their own wrong tokens (or those of
someone behind the same address), for at most a minute.

The throttle (``AuthThrottle``): after ``FAILURES`` wrong tokens within ``WINDOW`` from
one client, that client's attempts with a token are held until the oldest of those
failures leaves the window. Per client, so someone guessing elsewhere never holds the
owner back. The table is bounded: at most ``MAX_CLIENTS`` clients are remembered, and
when a new one comes the one whose last failure is oldest is forgotten, so a flood of
addresses costs a bounded amount of memory (and can only make the throttle forget).

The client (``client_key``, also the key of the connection cap in
``agent.app.connections``): the connecting address, or, when that is a trusted reverse
proxy (``TRUSTED_PROXIES``), the rightmost address in ``X-Forwarded-For`` that is not
one of them. Only a trusted proxy's word is taken: anyone can send ``X-Forwarded-For``,
so from any other peer it is ignored, and from a trusted one only the hops that trusted
proxies appended count (an address a client put at the left is never reached while an
untrusted hop stands to its right). IPv6 clients are keyed by their /64, the block one
subscriber usually holds, so hopping between addresses of one's own block does not
make a new client.
"""

from __future__ import annotations

import hmac
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import TYPE_CHECKING

from agent.config import Settings

if TYPE_CHECKING:
    from aiohttp import web

Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address
UNKNOWN = "unknown"
MAX_HOP_CHARS = 64


def client_key(peer: str | None, forwarded_for: Iterable[str], trusted: Sequence[Network]) -> str:
    """The client of a request from ``peer`` carrying ``forwarded_for`` (every
    ``X-Forwarded-For`` header, in order)."""
    address = _parse(peer)
    if address is None:
        return (peer or UNKNOWN)[:MAX_HOP_CHARS]
    if not in_networks(address, trusted):
        return _key(address)
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
    for hop in reversed(hops):
        if not hop:
            continue
        parsed = _parse(hop)
        if parsed is None:  # written by a trusted proxy, so no client chose it
            return hop[:MAX_HOP_CHARS]
        address = parsed
        if not in_networks(address, trusted):
            break
    return _key(address)


def _parse(text: str | None) -> Address | None:
    """An address, also as a hop may write it: ``[v6]``, ``[v6]:port``, ``v4:port``."""
    if not text:
        return None
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ip_address(text)
    except ValueError:
        return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def in_networks(address: Address, trusted: Sequence[Network]) -> bool:
    """Whether ``address`` is in one of ``trusted`` (an IPv4 address is never in an IPv6
    network, nor the other way round)."""
    return any(address.version == net.version and address in net for net in trusted)


def _key(address: Address) -> str:
    if isinstance(address, IPv6Address):
        return str(IPv6Network((address, 64), strict=False))
    return str(address)


FAILURES = 10
WINDOW = timedelta(minutes=1)
MAX_CLIENTS = 4096


@dataclass
class AuthThrottle:
    failures: int = FAILURES
    window: timedelta = WINDOW
    max_clients: int = MAX_CLIENTS
    _recent: OrderedDict[str, deque[datetime]] = field(default_factory=OrderedDict)
    """Per client, its last ``failures`` wrong tokens; the least recently failing first."""

    def __len__(self) -> int:
        return len(self._recent)

    def _current(self, client: str, now: datetime) -> deque[datetime] | None:
        recent = self._recent.get(client)
        if recent is None:
            return None
        while recent and now - recent[0] >= self.window:
            recent.popleft()
        if not recent:
            del self._recent[client]
            return None
        return recent

    def retry_after(self, client: str, now: datetime) -> int | None:
        """Seconds until ``client`` may try a token again; None when it may now."""
        recent = self._current(client, now)
        if recent is None or len(recent) < self.failures:
            return None
        wait = (recent[0] + self.window - now).total_seconds()
        return max(1, math.ceil(wait))

    def failed(self, client: str, now: datetime) -> None:
        """Count one wrong token from ``client``."""
        recent = self._current(client, now) or deque(maxlen=self.failures)
        recent.append(now)
        self._recent[client] = recent
        self._recent.move_to_end(client)
        while len(self._recent) > self.max_clients:
            self._recent.popitem(last=False)


def bearer_matches(header: str, token: str) -> bool:
    """``Authorization: Bearer <token>``; the scheme is case-insensitive (RFC 7235)."""
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())


class TooManyTries(Exception):
    """The client sent too many wrong tokens lately; ``wait`` is seconds until it may try."""

    def __init__(self, wait: int) -> None:
        super().__init__(f"too many wrong tokens; try again in {wait} s")
        self.wait = wait


@dataclass
class AdminGate:
    settings: Settings
    clock: Callable[[], datetime]
    throttle: AuthThrottle = field(default_factory=AuthThrottle)

    @property
    def token(self) -> str | None:
        secret = self.settings.admin_token
        return secret.get_secret_value() if secret is not None else None

    def client(self, request: web.Request) -> str:
        forwarded = request.headers.getall("X-Forwarded-For", [])
        return client_key(request.remote, forwarded, self.settings.trusted_proxies)

    def admit(self, request: web.Request) -> str:
        """The request's client, if it may try a token now; else ``TooManyTries``."""
        client = self.client(request)
        wait = self.throttle.retry_after(client, self.clock())
        if wait is not None:
            raise TooManyTries(wait)
        return client

    def failed(self, client: str) -> None:
        self.throttle.failed(client, self.clock())

    def bearer(self, request: web.Request) -> bool | None:
        """None when the request has no ``Authorization`` header (or no token is set);
        whether its bearer is the admin token otherwise, a wrong one counted against the
        client. ``TooManyTries`` when the client is held."""
        header = request.headers.get("Authorization")
        token = self.token
        if header is None or token is None:
            return None
        client = self.admit(request)
        if bearer_matches(header, token):
            return True
        self.failed(client)
        return False

    def form_token(self, client: str, given: object, most_chars: int) -> bool:
        """Whether ``given`` (a login form's field, from ``client`` as ``admit`` named
        it) is the admin token; a wrong one is counted against ``client``."""
        token = self.token
        right = (
            token is not None
            and isinstance(given, str)
            and len(given) <= most_chars
            and hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())
        )
        if not right:
            self.failed(client)
        return right
