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
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.config import Settings

UNUSED = ("httpx._main", "trio")


def skip_unused_imports(names: Iterable[str] = UNUSED) -> None:
    """Call first thing in the process; a module already imported is left alone."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError


def unused_by(settings: Settings) -> tuple[str, ...]:
    """Modules these settings never need, beyond ``UNUSED``."""
    from agent.tools.mcp_config import mcp_config_path

    return () if mcp_config_path(settings) is not None else ("cryptography",)
