"""Run leases: which process holds a ``running`` run record (``storage.repos.runs``).

A run record carries its holder (``owner``: this process's boot id, host, pid and a
random part, so a restarted process is a new holder even with the same pid, as in a
container) and ``lease_until``. While its runs are in flight a process renews their
leases every ``renew_every`` seconds, all in one write. A process that dies stops
renewing; once a lease has lapsed, any process may reclaim the record
(``scheduler.fires.recovery``). A process that stops cleanly lets its leases lapse at
once. A run whose outcome could not be written (the database was away) stays held
until the outcome is written, so its record is not reclaimed from under it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bson import ObjectId

from runtime.tasks import stop_task
from storage.repos.runs.record import Holder
from storage.repos.runs.store import RunStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseTerms:
    ttl: timedelta = timedelta(seconds=30)
    """How long a run stays held without a renewal: how soon a dead process's run is
    reclaimed when nothing else tells that it died (another MongoDB client)."""
    renew_every: float = 10.0
    """Seconds between renewals; well inside ``ttl``, so a busy moment does not lose it."""


def boot_id() -> str:
    """This process's identity as a holder: unique to this start of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class RunLeases:
    """The leases of the runs this process has in flight, kept alive while they run."""

    def __init__(
        self,
        runs: RunStore,
        clock: Callable[[], datetime],
        *,
        owner: str | None = None,
        terms: LeaseTerms | None = None,
    ) -> None:
        self._runs = runs
        self._clock = clock
        self.owner = owner or boot_id()
        self.terms = terms or LeaseTerms()
        self.started_at = clock()
        """When this holder began: a run another process began before it, on a database
        only this process can reach, was cut off (``scheduler.fires.recovery``)."""
        self._held: set[ObjectId] = set()
        self._timer: asyncio.TimerHandle | None = None
        """The next renewal, armed while runs are held (a timer, not a task sleeping:
        nothing waits between renewals)."""
        self._renewer: asyncio.Task[None] | None = None
        """The renewal under way, if one is."""

    def holder(self, now: datetime) -> Holder:
        """What a run record says about its holder when a try starts."""
        return Holder(self.owner, now + self.terms.ttl)

    def hold(self, run_id: ObjectId) -> None:
        """Keep the lease of ``run_id`` alive until ``drop``."""
        self._held.add(run_id)
        self._arm()

    def drop(self, run_id: ObjectId) -> None:
        self._held.discard(run_id)
        if not self._held:  # nothing left to renew; the next hold arms the timer again
            self._disarm()

    def _arm(self) -> None:
        if self._timer is None and (self._renewer is None or self._renewer.done()):
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.terms.renew_every, self._renew_now)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None

    def _renew_now(self) -> None:
        """The timer fired: renew, then arm it again while runs are still held."""
        self._timer = None
        if not self._held:
            return
        self._renewer = asyncio.get_running_loop().create_task(self.renew(), name="run leases")
        self._renewer.add_done_callback(self._renewed)

    def _renewed(self, task: asyncio.Task[None]) -> None:
        if task is self._renewer:
            self._renewer = None
        if self._held and not task.cancelled():
            self._arm()

    @property
    def held(self) -> frozenset[ObjectId]:
        """The ids of the runs held here now."""
        return frozenset(self._held)

    async def renew(self) -> None:
        """Move the leases of the runs held here ahead by ``ttl``, now."""
        try:
            until = self._clock() + self.terms.ttl
            await self._runs.renew(list(self._held), self.owner, until)
        except Exception as exc:  # tried again at the next renewal, well inside the lease
            log.warning("could not renew %d run lease(s): %s", len(self._held), exc)

    async def release(self) -> None:
        """Stop renewing, and let the leases of this process's runs still ``running``
        (cut off by a stop) lapse now, so the next start reclaims them at once."""
        renewing, self._renewer = self._renewer, None
        self._disarm()
        await stop_task(renewing)
        self._held.clear()
        try:
            await self._runs.release(self.owner, self._clock())
        except asyncio.CancelledError:  # the app's stop deadline passed (a stuck database)
            log.warning(
                "run leases not released before the stop's deadline; they lapse within %.0f s",
                self.terms.ttl.total_seconds(),
            )
            raise
        except Exception as exc:  # they lapse by themselves within ttl
            log.warning("could not release run leases: %s", exc)
