"""Modules a running agent never uses, kept out of its memory.

httpx (under python-telegram-bot and the OpenAI SDK) imports its command-line client
at once when click, rich and pygments are installed (as development tools bring
them): about 80 modules and 6 MiB that the agent never calls. Marked as missing
before anything imports httpx, httpx falls back to its stub ``main``.
"""

from __future__ import annotations

import sys

UNUSED = ("httpx._main",)


def skip_unused_imports() -> None:
    """Call first thing in the process; a module already imported is left alone."""
    for name in UNUSED:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
