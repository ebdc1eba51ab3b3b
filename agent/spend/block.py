"""This process's block of the day's token budget: headroom held in the shared ledger
once, handed out to model calls here without a database command.

The ledger (``storage.repos.token_budget``) holds, per process, one number: what its
block holds (``procs.<id>.n``). Here that number is split: what calls in flight hold
(``out``), what settled calls used and the ledger does not know yet (``spent``), and what
is free for the next calls (``free``). A call used beyond its hold counts as ``loose``
(used without a reservation). ``TokenBudget`` writes ``spent`` and ``loose`` to the
ledger together, in one command (a flush, or the next lease), and gives ``free`` back
when the process is idle.

Plain bookkeeping, no I/O: what the ledger holds for this block is only ever changed
after the command that changed it succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime


@dataclass(eq=False)
class Block:
    """The headroom one process holds on ``day``."""

    day: date
    held: int = 0
    """What the ledger holds for this block (``out + spent + free``)."""
    out: int = 0
    """Held by this process's calls in flight."""
    spent: int = 0
    """Used by settled calls, within their holds, not yet counted in the ledger."""
    loose: int = 0
    """Used beyond holds (or by calls of a block that expired), not yet counted."""
    returning: int = 0
    """Free headroom being given back (a flush in flight): no call may take it."""
    grants_until: datetime | None = None
    """Calls may be let through from the block until then (``TokenBudget.renew_every``
    after the lease that set its ``until``; later the next lease renews it)."""
    dead: bool = False
    """The ledger no longer holds it (its day closed, or its hold expired)."""

    @property
    def free(self) -> int:
        return max(0, self.held - self.out - self.spent - self.returning)

    @property
    def pending(self) -> int:
        """Tokens used here that the ledger does not count yet."""
        return self.spent + self.loose

    def fits(self, tokens: int, now: datetime) -> bool:
        """Whether a call of ``tokens`` may be let through from the block now."""
        return (
            not self.dead
            and self.free >= tokens
            and self.grants_until is not None
            and now < self.grants_until
        )

    def grant(self, tokens: int) -> None:
        self.out += tokens

    def settle(self, held: int, used: int) -> None:
        """A call that held ``held`` used ``used``: within its hold it is ``spent``,
        beyond it ``loose``."""
        self.out -= held
        self.spent += min(used, held)
        self.loose += max(0, used - held)

    def leased(self, more: int, grants_until: datetime) -> None:
        """The ledger holds ``more`` for the block (and its ``until`` was renewed)."""
        self.held += more
        self.grants_until = grants_until

    def flushed(self, spent: int, loose: int, freed: int) -> None:
        """The ledger counted ``spent`` and ``loose`` and took ``freed`` back (what the
        flush sent: more may have settled meanwhile)."""
        self.held -= spent + freed
        self.spent -= spent
        self.loose -= loose

    def orphan(self) -> Block:
        """The ledger lost this block's hold (it expired): what it used is counted as
        used without a reservation, by a new block (its calls in flight settle there,
        ``loose``)."""
        self.dead = True
        fresh = Block(self.day, loose=self.spent + self.loose)
        self.spent = self.loose = 0
        return fresh
