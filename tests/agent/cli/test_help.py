"""``watchkeeper --help`` speaks to the owner: what it is and where to start, no note
for developers about the event loop (issue 39, item 9)."""

from __future__ import annotations

import subprocess
import sys


def test_help_says_where_to_start_and_nothing_about_internals() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "a personal agent on Telegram, WhatsApp and SMS" in done.stdout
    assert "`doctor` says what is missing" in done.stdout
    for internal in ("uvloop", "runtime.loop", "``"):
        assert internal not in done.stdout, internal
