"""The system's trust store is read when a TLS connection first needs it.

Importing ``aiohttp.connector`` makes two SSL contexts: a verifying one
(``ssl.create_default_context()``) and one that verifies nothing yet still calls
``set_default_verify_paths()``. Each reads and parses the system's CA bundle: together
~60-100 ms of the ~300 ms aiohttp import and 3.1 MiB resident (144 certificates,
measured on this machine), on the way to the first long poll. The non-verifying
context never needs them, and nothing needs them before a TLS handshake.

``read_trust_store_on_use()`` makes ``SSLContext.set_default_verify_paths`` note the
request; the context reads the default paths before it first wraps a connection
(``wrap_socket``, ``wrap_bio``: what asyncio, uvloop and every client call) or lists
its certificates. Certificates loaded explicitly (``load_verify_locations``) are read
at once, as before. A context that never makes a TLS connection never reads the store.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import Any

PENDING = "_watchkeeper_default_paths_pending"
"""Set on a context whose default verify paths are still to be read."""
_LOCK = threading.Lock()
_INSTALLED = "_watchkeeper_lazy_trust"


def _load_pending(context: ssl.SSLContext, real: Callable[[ssl.SSLContext], None]) -> None:
    if not context.__dict__.get(PENDING):
        return
    with _LOCK:
        if context.__dict__.pop(PENDING, False):
            real(context)


def read_trust_store_on_use() -> None:
    """Install once per process, before aiohttp (or anything making contexts) loads."""
    cls = ssl.SSLContext
    if getattr(cls, _INSTALLED, False):
        return
    real_paths = cls.set_default_verify_paths

    def set_default_verify_paths(self: ssl.SSLContext) -> None:
        self.__dict__[PENDING] = True

    def reading_first(name: str) -> Callable[..., Any]:
        method = getattr(cls, name)

        def wrapper(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> Any:
            _load_pending(self, real_paths)
            return method(self, *args, **kwargs)

        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__doc__ = method.__doc__
        return wrapper

    cls.set_default_verify_paths = set_default_verify_paths  # type: ignore[method-assign]
    for name in ("wrap_socket", "wrap_bio", "get_ca_certs", "cert_store_stats"):
        setattr(cls, name, reading_first(name))
    setattr(cls, _INSTALLED, True)
