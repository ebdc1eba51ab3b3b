"""One round of sending an alert: the first delivery or an escalation step.

Each round goes through the ``Pager`` (chat copies and the SMS page), then is recorded
on the alert in one conditional update that also arms the next escalation timer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from agent.alerts.directives import format_duration
from agent.alerts.lifecycle import escalation_after
from agent.alerts.paging import Paged, Pager
from agent.alerts.policy import RoutingPolicy
from agent.alerts.store import AlertStore, entry

log = logging.getLogger(__name__)
Doc = dict[str, Any]


class Sender:
    def __init__(
        self, store: AlertStore, pager: Pager, policy: Callable[[], RoutingPolicy]
    ) -> None:
        """``policy``: a getter, since the router loads its routing policy on start."""
        self._store = store
        self._pager = pager
        self._policy = policy

    async def deliver(self, alert: Doc, now: datetime) -> None:
        """First delivery (or a reminder): critical everywhere, others to the first chat."""
        lead = str(alert.get("lead") or "")
        seq = int(alert.get("seq") or 0)
        sent: list[str] = []
        paged: Paged | None = None
        if alert["severity"] == "critical":
            paged = await self._pager.page(alert, now, seq, lead)
            sent = await self._pager.send_everywhere(alert, seq, lead)
        else:
            first = await self._pager.send_first(alert, seq, lead)
            if first is not None:
                sent.append(first.channel)
            elif alert["severity"] == "warning" and self._policy().warnings_page:
                paged = await self._pager.page(alert, now, seq, lead)
        await self._sent(alert, now, sent, paged, delivered=True)

    async def escalate(self, alert: Doc, now: datetime, lead: str = "") -> tuple[Paged, list[str]]:
        """Not acknowledged in time: page by SMS, or on every chat when SMS cannot go."""
        if not lead and alert["severity"] == "critical":
            rounds = int(alert.get("sms_rounds") or 0) + 1
            lead = f"Page {rounds} of {self._policy().critical_max_sms}, not acknowledged."
        elif not lead:
            age = format_duration(now - (alert.get("delivered_at") or alert["created_at"]))
            lead = f"Not acknowledged after {age}."
        seq = int(alert.get("seq") or 0)
        paged = await self._pager.page(alert, now, seq, lead)
        sent: list[str] = []
        if paged != "sent":
            sent = await self._pager.send_everywhere(alert, seq, lead)
        await self._sent(alert, now, list(sent), paged, delivered=False)
        return paged, sent

    async def _sent(
        self, alert: Doc, now: datetime, sent: list[str], paged: Paged | None, *, delivered: bool
    ) -> None:
        """Record one round of sending and arm the next timer."""
        if paged == "sent":
            sent.append("sms")
        pages = 1 if paged is not None else 0
        counted = {**alert, "sms_rounds": int(alert.get("sms_rounds") or 0) + pages}
        timer = escalation_after(counted, now, self._policy(), delivered=False)
        fields: Doc = {
            "seq": int(alert.get("seq") or 0) + 1,
            "held": False,
            "updated_at": now,
            "last_page": paged,
        }
        if sent:
            fields["last_sent_at"] = now
            if delivered and not alert.get("delivered_at"):
                fields["delivered_at"] = now
        detail = ", ".join(sent) if sent else "nowhere: no channel took it"
        if paged in ("budget", "unavailable", "failed"):
            detail += f"; sms {paged}"
        await self._store.change(
            alert["_id"],
            when_status=("open",),
            set_=fields | timer,
            unset=("lead",),
            inc={"sms_rounds": pages, "sms_sent": 1 if paged == "sent" else 0},
            history=[entry(now, "router", "sent" if delivered else "escalated", detail)],
            delivered=[{"at": now, "channel": ch} for ch in sent],
        )
        if not sent:
            log.error("alert #%s reached no channel", alert["code"])
