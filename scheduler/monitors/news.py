"""What the owner is told about a monitor, and when: flap damping and a rate limit.

A monitor's state (up or down) follows every check; what the owner hears follows it
with two brakes, as Healthchecks.io and Uptime Kuma have them:

1. **Flapping.** A monitor whose state changed more than ``flap_changes`` times within
   ``flap_window`` is *flapping*: the owner gets one "flapping" alert instead of a
   message per change, and hears nothing more until it has been steady (no change)
   for ``settle``; then its state at that moment, once.
2. **At most one message per monitor per ``quiet``.** News that comes sooner waits;
   when the time is up, what is true *then* is told (a down and up again in the
   meantime is no news at all).

Pure: ``news`` takes the stored facts and the time and returns what to say now, if
anything; ``scheduler.monitors.service`` says it and stores that it did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from storage.repos.monitor_record import Word


@dataclass(frozen=True)
class Damping:
    quiet: timedelta = timedelta(minutes=5)
    """At most one message per monitor per this long."""
    flap_changes: int = 4
    """More changes of state than this within ``flap_window`` make a monitor flapping."""
    flap_window: timedelta = timedelta(hours=1)
    settle: timedelta = timedelta(minutes=15)
    """A flapping monitor is steady again after this long without a change."""

    kept: int = 100
    """The latest changes a monitor keeps (within ``flap_window``), to count them."""


def noted(changes: Sequence[datetime], at: datetime, damping: Damping) -> list[datetime]:
    """``changes`` with one more at ``at``: those within the window, the latest kept."""
    return [*recent(changes, at, damping), at][-damping.kept :]


def recent(changes: Sequence[datetime], now: datetime, damping: Damping) -> list[datetime]:
    """The changes within the flap window before ``now``."""
    return [at for at in changes if at > now - damping.flap_window]


def truth(
    state: str, told: Word, changes: Sequence[datetime], now: datetime, damping: Damping
) -> Word:
    """What is true now, as the owner would be told it: flapping while the changes say
    so (and, once told, until it is steady for ``settle``), else its state."""
    unsettled = bool(changes) and now - changes[-1] < damping.settle
    flapping = told == "flapping" or len(recent(changes, now, damping)) > damping.flap_changes
    if unsettled and flapping:
        return "flapping"
    return "down" if state == "down" else "up"


def news(
    state: str,
    told: Word,
    told_at: datetime | None,
    changes: Sequence[datetime],
    now: datetime,
    damping: Damping,
) -> Word | None:
    """What to tell the owner now, or None: nothing new, or too soon after the last
    message (it is looked at again later, and whatever is true then is told)."""
    word = truth(state, told, changes, now, damping)
    if word == told:
        return None
    if told_at is not None and now - told_at < damping.quiet:
        return None
    return word


def flap_text(changes: Sequence[datetime], now: datetime, damping: Damping) -> str:
    """``changed state 40 times in 12 s``: why a monitor is called flapping."""
    seen = recent(changes, now, damping)
    span = int((seen[-1] - seen[0]).total_seconds()) if seen else 0
    took = f"{span} s" if span < 60 else f"{round(span / 60)} min"
    return f"changed state {len(seen)} times in {took}"
