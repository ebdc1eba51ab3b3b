"""Who may see the dashboard: ``Authorization: Bearer <ADMIN_TOKEN>`` or a session cookie.

``POST /login`` with the right token (constant-time compare, ``AdminGate``) sets a session cookie
(HttpOnly, SameSite=Strict, Secure over https, expiring after ``SESSION_HOURS``). The
cookie is ``<session id>.<expiry>.<signature>``, signed with a key derived from
``ADMIN_TOKEN`` by HMAC, so changing the token logs every session out; logging out
remembers the session id as revoked until it would have expired anyway.

Every POST behind the login carries a CSRF token (hidden field ``csrf``, from
``csrf_field(request)`` in templates): an HMAC of the session id, checked in constant
time. A request authorised by the bearer header has the fixed session id ``bearer``.

Logged-out sessions survive a restart (``storage.repos.dashboard_sessions``): the
``settings`` document ``dashboard_sessions`` maps each revoked session id to when its
cookie would have expired anyway (then it is dropped). Loaded when the web app starts;
written at each logout.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aiohttp import web

from agent.app.access import AdminGate
from agent.config import Settings
from storage.repos.dashboard_sessions import RevokedStore

SESSION_COOKIE = "wk_session"
FLASH_COOKIE = "wk_flash"
SESSION_HOURS = 12
FLASH_SECONDS = 60
CSRF_FIELD = "csrf"
BEARER_SESSION = "bearer"
SESSION_KEY: web.RequestKey[str] = web.RequestKey("dashboard_session", str)
"""The request's session id, set once it is authenticated."""
MAX_FLASH = 500


def _key(token: str, purpose: str) -> bytes:
    return hmac.new(token.encode(), f"watchkeeper dashboard {purpose}".encode(), "sha256").digest()


def _sign(key: bytes, text: str) -> str:
    digest = hmac.new(key, text.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class Sessions:
    """Issues and checks session cookies, CSRF tokens and flash messages."""

    settings: Settings
    gate: AdminGate
    """The bearer check and the per-client throttle on wrong tokens."""
    store: RevokedStore | None = None
    """Where logouts are kept across restarts (None: in memory only)."""
    revoked: dict[str, datetime] = field(default_factory=dict)
    """Logged-out session ids, until they would have expired."""

    async def load(self, now: datetime) -> None:
        """The logouts remembered from earlier runs (at web app start)."""
        if self.store is not None:
            self.revoked = await self.store.load(now) | self.revoked

    @property
    def token(self) -> str | None:
        secret = self.settings.admin_token
        return secret.get_secret_value() if secret is not None else None

    def new_cookie(self, now: datetime) -> str:
        token = self.token
        assert token is not None
        sid = secrets.token_urlsafe(18)
        expires = int((now + timedelta(hours=SESSION_HOURS)).timestamp())
        body = f"{sid}.{expires}"
        return f"{body}.{_sign(_key(token, 'session'), body)}"

    def session_of(self, request: web.Request, now: datetime) -> str | None:
        """The session id the request is authorised by, or None: its session cookie if
        that is valid (a session logged in is never held back), else its bearer header
        (``AdminGate.bearer``: ``TooManyTries`` when the client is held)."""
        token = self.token
        if token is None:
            return None
        sid = self._cookie_session(request, token, now)
        if sid is not None:
            return sid
        return BEARER_SESSION if self.gate.bearer(request) else None

    def _cookie_session(self, request: web.Request, token: str, now: datetime) -> str | None:
        sid, _, rest = request.cookies.get(SESSION_COOKIE, "").partition(".")
        expires, _, signature = rest.partition(".")
        if not sid or not expires.isdigit() or not signature:
            return None
        expected = _sign(_key(token, "session"), f"{sid}.{expires}")
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        if int(expires) <= now.timestamp() or sid in self.revoked:
            return None
        return sid

    async def revoke(self, request: web.Request, now: datetime) -> None:
        sid = self.session_of(request, now)
        self.revoked = {s: t for s, t in self.revoked.items() if t > now}
        if sid is not None and sid != BEARER_SESSION:
            self.revoked[sid] = now + timedelta(hours=SESSION_HOURS)
            if self.store is not None:
                await self.store.save(self.revoked)

    def csrf_token(self, sid: str) -> str:
        token = self.token or ""
        return _sign(_key(token, "csrf"), sid)

    def csrf_ok(self, sid: str, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.csrf_token(sid).encode())

    # -- flash: one line of outcome shown on the page a POST redirects to -------------

    def flash_cookie(self, text: str) -> str:
        body = base64.urlsafe_b64encode(text[:MAX_FLASH].encode()).decode()
        return f"{body}.{_sign(_key(self.token or '', 'flash'), body)}"

    def flash_of(self, request: web.Request) -> str | None:
        body, _, signature = request.cookies.get(FLASH_COOKIE, "").partition(".")
        if not body or not signature:
            return None
        expected = _sign(_key(self.token or "", "flash"), body)
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            return None
        try:
            return base64.urlsafe_b64decode(body.encode()).decode()
        except ValueError:
            return None


def is_secure(request: web.Request) -> bool:
    """https directly, or behind a TLS proxy that says so (``X-Forwarded-Proto``). A
    forged header can only make the cookie stricter."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


def set_session(response: web.StreamResponse, request: web.Request, value: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=SESSION_HOURS * 3600,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=is_secure(request),
    )


def set_flash(response: web.StreamResponse, request: web.Request, value: str) -> None:
    response.set_cookie(
        FLASH_COOKIE,
        value,
        max_age=FLASH_SECONDS,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=is_secure(request),
    )
