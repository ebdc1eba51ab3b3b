"""Every open alert at once: GoAlert's ``12aa`` (ack all) and ``12cc`` (close all).

One typo away from ``12a``, so the first ``12cc`` only asks, in one line, naming the
alerts it would touch; sending it again within ``CONFIRM_WITHIN`` applies it to
exactly those alerts (not to any raised meanwhile). The pending question lives in
``settings`` per chat, so a restart or a second instance sees it too.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agent.alerts.directives import Ack, AckAll, Resolve, ResolveAll
from agent.alerts.router import AlertRouter

CONFIRM_WITHIN = timedelta(minutes=10)
MAX_ALERTS = 100
SHOWN = 8
_TARGETS = {"ack_all": ("open", "snoozed"), "resolve_all": None}
"""Ack all leaves muted and acknowledged alerts alone; resolve all takes every open one."""


def _listed(codes: list[str]) -> str:
    shown = ", ".join(f"#{code}" for code in codes[:SHOWN])
    return shown + (f" and {len(codes) - SHOWN} more" if len(codes) > SHOWN else "")


def _plural(n: int) -> str:
    return f"{n} alert" + ("" if n == 1 else "s")


async def bulk_reply(
    router: AlertRouter,
    directive: AckAll | ResolveAll,
    *,
    chat: str,
    form: str,
    now: datetime,
    by: str,
) -> str:
    """Ask first; apply when the same request comes back in time. Returns the one line."""
    store = router.store
    verb = "acknowledge" if isinstance(directive, AckAll) else "resolve"
    pending = await store.take_bulk(chat, directive.kind, now)
    if pending is not None:
        return await _apply(router, directive, pending, verb, by)
    statuses = _TARGETS[directive.kind]
    alerts = await router.store.unresolved(MAX_ALERTS)
    codes = sorted(
        (a.code for a in alerts if statuses is None or a.status in statuses),
        key=lambda code: (len(code), code),
    )
    if not codes:
        return f"No open alerts to {verb}."
    await store.ask_bulk(chat, directive.kind, codes, now + CONFIRM_WITHIN)
    minutes = int(CONFIRM_WITHIN.total_seconds() // 60)
    return (
        f"{verb.capitalize()} all {_plural(len(codes))} ({_listed(codes)})? "
        f"Send {form} again within {minutes} min to confirm."
    )


async def _apply(
    router: AlertRouter, directive: AckAll | ResolveAll, codes: list[str], verb: str, by: str
) -> str:
    single = Ack() if isinstance(directive, AckAll) else Resolve()
    changed = [code for code in codes if (await router.apply(code, single, by)).changed]
    done = "Acknowledged" if verb == "acknowledge" else "Resolved"
    if not changed:
        return f"Nothing to do: {_listed(codes)} had changed meanwhile."
    text = f"{done} {_plural(len(changed))}: {_listed(changed)}."
    skipped = [code for code in codes if code not in changed]
    if skipped:
        text += f" {_listed(skipped)} had changed meanwhile."
    return text
