"""The admin token's gate, shared by ``/api/*`` and the dashboard: the bearer check and
the per-client throttle on wrong tokens (``auth_throttle``).

Every place that compares a token the client sent with ``ADMIN_TOKEN`` (a bearer
header on ``/api/*`` or a dashboard page, the ``POST /login`` form) goes through
``AdminGate``: a held client gets ``TooManyTries`` (answered 429 with ``Retry-After``
by ``agent.app.http``) before its token is looked at, the right one included. Checking
it anyway would tell a guesser at full speed which guess is right, and the throttle
would hold nobody back; the owner is held only by their own wrong tokens (or those of
someone behind the same address), for at most a minute.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from agent.app.auth_throttle import AuthThrottle
from agent.app.client_address import client_key
from agent.config import Settings

if TYPE_CHECKING:
    from aiohttp import web


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
