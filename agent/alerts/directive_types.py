"""What a reply to an alert can mean: the directive types and the parse result.

Plain values with no behaviour: the grammar (``directives``) produces them, the
lifecycle, the router and the schedule services apply them.
"""

from dataclasses import dataclass
from datetime import time, timedelta
from typing import ClassVar, Final, Literal, TypeAlias

Scope = Literal["alert", "all", "cron", "pulse"]
Cadence = Literal["hourly", "daily", "weekly", "weekdays"]
IntervalUnit = Literal["minutes", "hours", "days"]

MIN_HOLD: Final = timedelta(minutes=1)
MAX_HOLD: Final = timedelta(days=30)
DEFAULT_SNOOZE: Final = timedelta(hours=1)
DEFAULT_MUTE: Final = timedelta(days=1)
PULSES_PER_DAY: Final = range(1, 49)
"""Any whole number 1-48, as ``scheduler.pulse.grid.PULSES_PER_DAY``."""
MAX_INTERVAL_DAYS: Final = 31


@dataclass(frozen=True, slots=True)
class Ack:
    """Acknowledge: stops escalation, the alert stays open."""

    kind: ClassVar[Literal["ack"]] = "ack"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Resolve:
    """Close the alert: the problem is gone."""

    kind: ClassVar[Literal["resolve"]] = "resolve"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Snooze:
    """Hold escalation and repeats of this alert for ``duration``."""

    duration: timedelta
    kind: ClassVar[Literal["snooze"]] = "snooze"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Mute:
    """Silence new alerts with the same dedupe key for ``duration``."""

    duration: timedelta
    kind: ClassVar[Literal["mute"]] = "mute"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Unmute:
    """Lift a mute early."""

    kind: ClassVar[Literal["unmute"]] = "unmute"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class Escalate:
    """Run the alert's next escalation step now (an SMS page), whatever its timer says."""

    kind: ClassVar[Literal["escalate"]] = "escalate"
    scope: ClassVar[Scope] = "alert"


@dataclass(frozen=True, slots=True)
class AckAll:
    """GoAlert's ``<code>aa``: acknowledge every open alert, once the owner confirms."""

    kind: ClassVar[Literal["ack_all"]] = "ack_all"
    scope: ClassVar[Scope] = "all"


@dataclass(frozen=True, slots=True)
class ResolveAll:
    """GoAlert's ``<code>cc``: resolve every open alert, once the owner confirms."""

    kind: ClassVar[Literal["resolve_all"]] = "resolve_all"
    scope: ClassVar[Scope] = "all"


@dataclass(frozen=True, slots=True)
class SetCadence:
    """Re-schedule the cron job that raised the alert; the time of day is kept."""

    cadence: Cadence
    kind: ClassVar[Literal["cadence"]] = "cadence"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class SetInterval:
    """Run the cron job every ``count`` ``unit``; always expressible as a cron step."""

    count: int
    unit: IntervalUnit
    kind: ClassVar[Literal["interval"]] = "interval"
    scope: ClassVar[Scope] = "cron"

    @property
    def interval(self) -> timedelta:
        return timedelta(**{self.unit: self.count})


@dataclass(frozen=True, slots=True)
class SetTime:
    """Move the cron job to this time of day (job's timezone), keeping its cadence."""

    at: time
    kind: ClassVar[Literal["at"]] = "at"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class PauseJob:
    """Disable the cron job that raised the alert."""

    kind: ClassVar[Literal["pause"]] = "pause"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class ResumeJob:
    """Re-enable the cron job that raised the alert."""

    kind: ClassVar[Literal["resume"]] = "resume"
    scope: ClassVar[Scope] = "cron"


@dataclass(frozen=True, slots=True)
class PausePulse:
    """Disable the pulse (heartbeat)."""

    kind: ClassVar[Literal["pause_pulse"]] = "pause_pulse"
    scope: ClassVar[Scope] = "pulse"


@dataclass(frozen=True, slots=True)
class ResumePulse:
    """Re-enable the pulse."""

    kind: ClassVar[Literal["resume_pulse"]] = "resume_pulse"
    scope: ClassVar[Scope] = "pulse"


@dataclass(frozen=True, slots=True)
class SetPulseRate:
    """Set ``pulses_per_day``; always in ``PULSES_PER_DAY`` (1-48)."""

    per_day: int
    kind: ClassVar[Literal["pulse_rate"]] = "pulse_rate"
    scope: ClassVar[Scope] = "pulse"


Directive: TypeAlias = (
    Ack
    | Resolve
    | Snooze
    | Mute
    | Unmute
    | Escalate
    | AckAll
    | ResolveAll
    | SetCadence
    | SetInterval
    | SetTime
    | PauseJob
    | ResumeJob
    | PausePulse
    | ResumePulse
    | SetPulseRate
)


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """What a reply means. At most one of ``directive``, ``error`` and ``reserved`` is set.

    ``directive is None`` and ``error is None`` and not ``reserved``: free text for the
    agent; ``code`` (and ``more``) are then the alerts the text names, if any.
    ``error``: a recognisable directive with bad parameters; tell the owner rather
    than asking the model. ``reserved``: a carrier keyword (STOP, HELP, ...), leave it
    alone. ``short``: a short acknowledgement ("k", "thx", "👍") that acks only when
    the message is a reply to an alert; otherwise it is free text.
    """

    code: str | None = None
    directive: Directive | None = None
    reserved: bool = False
    error: str | None = None
    short: bool = False
    more: tuple[str, ...] = ()
    """Further codes a free-text reply names, after ``code``."""
