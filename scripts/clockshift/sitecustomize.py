"""Moves this Python process's wall clock when ``WATCHKEEPER_CLOCK_SHIFT_SECONDS`` is set.

``scripts/test_at`` puts this folder on ``PYTHONPATH`` and sets the variable to one
shift, computed once, so the test run and every Python process it starts later (the
``watchkeeper`` processes of the CLI tests, inner pytest runs) see the same shifted
time: each travels to its own real ``now`` plus that shift, and the clock keeps ticking.
``time-machine`` moves ``time.time()``, ``datetime.now()`` and their relatives; the
monotonic clock, and with it every event loop's timers (asyncio's and uvloop's), stays
untouched, so timeouts and sleeps run at their real length.
"""

from __future__ import annotations

import os

_shift = os.environ.get("WATCHKEEPER_CLOCK_SHIFT_SECONDS", "").strip()
if _shift:
    from datetime import UTC, datetime, timedelta

    import time_machine

    try:
        _seconds = float(_shift)
    except ValueError:
        raise SystemExit(
            f"WATCHKEEPER_CLOCK_SHIFT_SECONDS={_shift!r} is not a number of seconds"
        ) from None
    time_machine.travel(datetime.now(UTC) + timedelta(seconds=_seconds), tick=True).start()
