"""Who a request comes from, for per-client limits: the connecting address, or, when
that is a trusted reverse proxy (``TRUSTED_PROXIES``), the rightmost address in
``X-Forwarded-For`` that is not one of them.

Only a trusted proxy's word is taken: anyone can send ``X-Forwarded-For``, so from any
other peer it is ignored, and from a trusted one only the hops that trusted proxies
appended count (an address a client put at the left is never reached while an
untrusted hop stands to its right). IPv6 clients are keyed by their /64, the block one
subscriber usually holds, so hopping between addresses of one's own block does not
make a new client.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

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
    if not _trusted(address, trusted):
        return _key(address)
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
    for hop in reversed(hops):
        if not hop:
            continue
        parsed = _parse(hop)
        if parsed is None:  # written by a trusted proxy, so no client chose it
            return hop[:MAX_HOP_CHARS]
        address = parsed
        if not _trusted(address, trusted):
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


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def _key(address: Address) -> str:
    if isinstance(address, IPv6Address):
        return str(IPv6Network((address, 64), strict=False))
    return str(address)
