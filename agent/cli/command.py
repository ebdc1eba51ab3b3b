"""How a person runs this install's command line, for the hints the log, the bot and
``watchkeeper doctor`` give (``<this> pair 123456``).

The CLI works it out once and hands the text to the app it builds (``build_app``'s
``cli``); nothing below the CLI looks at ``PATH`` or the checkout. Where the command is
typed somewhere else than where it runs (a container), the deploy kit says it in
``WATCHKEEPER_CLI`` (``deploy/docker-compose.yml``: ``docker compose ... exec
watchkeeper watchkeeper``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
"""The directory that holds ``agent/`` (a checkout's root, where ``scripts/run`` lives)."""


def cli_command() -> str:
    """``WATCHKEEPER_CLI`` when the deploy kit sets it; ``watchkeeper`` when that name on
    ``PATH`` is this install's, ``scripts/run`` when the agent runs from a checkout that
    has it (its path as typed from the working directory), else this interpreter's
    ``-m agent``."""
    told = " ".join(os.environ.get("WATCHKEEPER_CLI", "").split())
    if told:
        return told
    bin_dir = Path(sys.executable).parent
    on_path = shutil.which("watchkeeper")
    if on_path is not None and Path(on_path).parent == bin_dir:
        return "watchkeeper"
    script = CHECKOUT / "scripts" / "run"
    if script.is_file():
        try:
            return str(script.relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(script)
    return f"{sys.executable} -m agent"
