"""Modules a running agent never uses, kept out of its memory.

httpx (under python-telegram-bot and the model SDKs) imports its command-line client
at once when click, rich and pygments are installed (as development tools bring
them): about 80 modules and 6 MiB that the agent never calls. Marked as missing
before anything imports httpx, httpx falls back to its stub ``main``.

httpcore (under httpx) imports trio, when some other tool installed it, in case it
runs under trio: 50 modules, 4 MiB and ~0.1 s for an agent that only ever runs on
asyncio. Marked as missing, httpcore records that trio is absent.

python-telegram-bot imports cryptography, when something else installed it, for
Telegram Passport, which the agent does not use: 34 modules, ~7 MiB. It is needed
only by the MCP client (``mcp`` imports it at once), so it is marked as missing
unless MCP servers are configured (``unused_by``). google-genai with an API key and
twilio import without it.

python-telegram-bot imports its httpx transport (``HTTPXRequest``, and with it httpx,
httpcore and h11) to make a default one; the channel passes its own
(``channels.telegram_request.AiohttpRequest``) for every request. A stand-in module
takes its place (``without_ptb_httpx``): ~18% of the ``telegram`` import. httpx
itself stays importable for whatever else wants it (google-genai, MCP).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.config import Settings

UNUSED = ("httpx._main", "trio")
PTB_HTTPX = "telegram.request._httpxrequest"
NO_HTTPX_REQUEST = (
    "python-telegram-bot's HTTPXRequest is not loaded in watchkeeper (agent.cli.lean): "
    "pass request= and get_updates_request= (channels.telegram_request.AiohttpRequest)"
)


class StandInHTTPXRequest:
    """Takes ``HTTPXRequest``'s name; made only when a ``Bot`` gets no transport."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(NO_HTTPX_REQUEST)


def skip_unused_imports(names: Iterable[str] = UNUSED) -> None:
    """Call first thing in the process; a module already imported is left alone."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError


def unused_by(settings: Settings) -> tuple[str, ...]:
    """Modules these settings never need, beyond ``UNUSED``."""
    from agent.tools.mcp_config import mcp_config_path

    return () if mcp_config_path(settings) is not None else ("cryptography",)


def without_ptb_httpx() -> None:
    """Call before python-telegram-bot is imported; once it is, nothing changes."""
    if PTB_HTTPX in sys.modules or "telegram" in sys.modules:
        return
    module = types.ModuleType(PTB_HTTPX, "Stand-in for PTB's httpx transport (agent.cli.lean).")
    module.HTTPXRequest = StandInHTTPXRequest  # type: ignore[attr-defined]
    sys.modules[PTB_HTTPX] = module


def prepare_interpreter() -> None:
    """What ``watchkeeper`` does to its interpreter before anything loads, and the test
    suite too (``tests/conftest.py``), so the tests run the SDKs as the app runs them:
    python-telegram-bot without its httpx transport, the OpenAI SDK's type indexes
    deferred (``agent.cli.deferred``), the trust store read on first use
    (``agent.cli.lazy_trust``)."""
    from agent.cli.deferred import OPENAI_TYPES, defer_package_inits
    from agent.cli.lazy_trust import read_trust_store_on_use

    without_ptb_httpx()
    defer_package_inits(OPENAI_TYPES)
    read_trust_store_on_use()
