"""Binding the HTTP server's sockets, before anything else starts (light: no aiohttp)."""

from __future__ import annotations

import errno
import socket

from agent.config import ConfigError

BACKLOG = 128


def bind(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host``:``port`` (one per address the name resolves to), made
    before anything else starts, so a bad ``HTTP_HOST`` or a port in use stops start-up
    with one line (``ConfigError``) instead of a traceback after the database is up."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError) as exc:  # gaierror; IDNA refuses names like "a..b"
        raise ConfigError(
            f"invalid setting HTTP_HOST: cannot resolve {host!r} ({_reason(exc)}); use an "
            "address of this machine such as 127.0.0.1 or 0.0.0.0"
        ) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            # Listening now holds the port: two sockets with SO_REUSEADDR may both be
            # bound to it until one listens. Early clients wait in the backlog.
            sock.listen(BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigError(_bind_error(host, port, exc)) from None
    return sockets


def _bind_error(host: str, port: int, exc: OSError) -> str:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"invalid setting HTTP_PORT: {where} is already in use; stop what listens "
            "there or choose another HTTP_PORT"
        )
    if exc.errno == errno.EACCES:
        return (
            f"invalid setting HTTP_PORT: not allowed to listen on {where} (ports below "
            "1024 need privileges); choose another HTTP_PORT"
        )
    return (
        f"invalid setting HTTP_HOST: cannot listen on {where} ({_reason(exc)}); use an "
        "address of this machine such as 127.0.0.1 or 0.0.0.0"
    )


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc or type(exc).__name__)
