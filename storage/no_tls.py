"""The embedded database process without OpenSSL: it serves no TLS and no passwords.

SecantusDB's server module imports ``ssl`` (for a TLS listener) and its auth module
``hashlib`` (for SCRAM), and each loads OpenSSL's libcrypto: ~5 MiB of the process's
resident memory, measured here (``import ssl, hashlib`` in a bare interpreter). The
embedded server listens on 127.0.0.1 for the one process that started it, with no
TLS options and no users, so ``without_openssl()`` gives it, before ``secantus`` is
imported:

- in place of ``ssl``, this module: the names SecantusDB reads when TLS is off
  (``SSLError`` and ``SSLSocket`` for its ``except`` and ``isinstance`` checks, which
  then never match) and an ``SSLContext`` that refuses to be made, with a clear error,
  should anything ask for TLS;
- ``hashlib`` without OpenSSL: Python's own MD5, SHA-1 and SHA-2 (used by SecantusDB
  for replica-set retry fingerprints and password digests, neither used here).

The agent's own process is unaffected: it talks TLS to Telegram and the model.
"""

from __future__ import annotations

import socket
import sys
from typing import Any, NoReturn

PROTOCOL_TLS_SERVER = 17
CERT_NONE = 0
CERT_OPTIONAL = 1
CERT_REQUIRED = 2
NO_TLS = "the embedded database serves no TLS (storage.no_tls)"


class SSLError(OSError):
    """Never raised: there is no TLS to fail."""


class SSLSocket(socket.socket):
    """Never made: no connection is wrapped in TLS."""


class SSLContext:
    """Refuses to be made: TLS needs the real ``ssl`` module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(NO_TLS)


def __getattr__(name: str) -> NoReturn:
    raise AttributeError(f"ssl.{name}: {NO_TLS}")


def without_openssl() -> bool:
    """Call before anything imports ``ssl`` or ``hashlib``; False (and nothing done) if
    one of them is already imported."""
    if any(name in sys.modules for name in ("ssl", "_ssl", "hashlib", "_hashlib")):
        return False
    sys.modules["_hashlib"] = None  # type: ignore[assignment]  # hashlib: built-in hashes
    sys.modules["ssl"] = sys.modules[__name__]
    return True
