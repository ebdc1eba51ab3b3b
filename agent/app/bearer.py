"""The admin bearer check, shared by ``/api/*`` and the dashboard."""

from __future__ import annotations

import hmac


def bearer_matches(header: str, token: str) -> bool:
    """``Authorization: Bearer <token>``; the scheme is case-insensitive (RFC 7235)."""
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())
