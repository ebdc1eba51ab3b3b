"""The cyclic collector's settings for a process that serves.

A process that has imported its libraries holds a few hundred thousand objects that
live as long as it does (modules, classes, functions, schemas). Every full
collection walks them all again, which a burst of messages triggers several times.
``freeze_heap`` collects once, then moves everything alive into the permanent
generation (``gc.freeze``), so later collections look only at what was made since.

``tune_collector`` makes the youngest generation's collections rarer: CPython starts
one every 700 container objects allocated (less those freed), a few times in every
exchange, and each looks at every young object still alive (an exchange's requests,
replies and tasks). Nearly all of them are freed by their reference counts; cycles
wait a little longer for their collection.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)
YOUNG_THRESHOLD = 10_000
"""Container objects allocated (less those freed) between two collections of the youngest
generation (CPython's default: 700). In a burst of 100 chats the collector's time fell
from 0.3 to under 0.1 ms a message (``bench/RESULTS.md``, fifteenth sitting)."""


def freeze_heap() -> int:
    """Collect what start-up left as garbage, then freeze what remains. Returns how
    many objects are frozen; call it once the process has loaded what it will use."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d objects in %.0f ms", frozen, (time.perf_counter() - started) * 1000)
    return frozen


def tune_collector() -> None:
    """Collect the youngest generation every ``YOUNG_THRESHOLD`` objects; the older
    generations keep CPython's ratios."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
