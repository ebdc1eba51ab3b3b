"""The alerts feature: alert router, reply directives, tools and endpoints.

Started by ``build_app`` after the core. The router runs regardless and routes to
whatever channels are up, by their rules in the channel registry (``agent.reach``);
the SMS channel that pages and calls is the registry's (``agent.app.registry``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agent.alerts.calls import VOICE_WEBHOOK
from agent.alerts.intake import AlertError
from agent.alerts.page_test import PageTestError, PageTestRunning, PageTestTimes, progress
from agent.alerts.policy import RoutingPolicy, summary_line
from agent.alerts.router import AlertRouter
from agent.app.application import Feature, FeatureContext, Parts, Route, Services
from agent.context import RunContext
from agent.conversation.alert_replies import AlertReplies, alert_prompt_section, reply_words_section
from agent.conversation.dispatch import Command
from agent.conversation.prompt import changing
from agent.tools.alerts import MANAGE_ALERTS, RAISE_ALERT
from agent.tools.catalog import always
from channels.types import InboundMessage, PlacesCalls, Reply
from channels.webhook_body import BodyRefused, read_json_object
from runtime.clock import Clock
from storage.outside import Outside

log = logging.getLogger(__name__)
FIELDS = frozenset({"severity", "title", "body", "dedupe_key", "source"})
MAX_ALERT_BYTES = 64 * 1024
"""An alert's text fits in about 4,500 characters; 64 KiB leaves room for any escaping."""


@dataclass(frozen=True)
class AlertingOptions:
    background: bool = True
    """Run the escalation timer loop; tests drive ``router.tick(now)`` themselves."""
    policy: RoutingPolicy | None = None
    """Fixed routing numbers; None reads overrides from ``settings`` ``alert_routing``."""


def _api_raise(router: AlertRouter, read_timeout: float) -> Any:
    async def handler(request: web.Request) -> web.Response:
        """``POST /api/alerts``: existing monitors use Watchkeeper as their escalation path."""
        try:  # text made storable: the alert must be storable and sendable
            data = await read_json_object(request, limit=MAX_ALERT_BYTES, within=read_timeout)
        except BodyRefused as exc:
            return _json({"error": exc.reason}, exc.status)
        unknown = sorted(set(data) - FIELDS)
        if unknown:
            return _json({"error": f"unknown field(s): {_names(unknown)}"}, 400)
        try:  # the caller's words are outside text: sent quoted, as the caller's
            raised = await router.raise_alert(
                severity=data.get("severity"),
                title=_outside(data.get("title")),
                body=_outside(data.get("body", "")),
                dedupe_key=data.get("dedupe_key"),
                source=_outside(data.get("source") or "api"),
            )
        except AlertError as exc:
            return _json({"error": str(exc)}, 400)
        return _json(raised.view(), 200 if raised.deduplicated else 201)

    return handler


PAGE_TEST_FIELDS = frozenset({"step_seconds", "wait_seconds"})
PAGE_TEST_PATH = "/api/page-test"


def _api_page_test(router: AlertRouter, read_timeout: float) -> tuple[Route, Route]:
    """``POST /api/page-test`` starts a test page (``agent.alerts.page_test``; JSON
    body optional: ``step_seconds``, ``wait_seconds``) and answers 202 with its progress,
    409 while one runs; ``GET /api/page-test/{code}`` answers its progress so far."""

    async def begin(request: web.Request) -> web.Response:
        data: dict[str, Any] = {}
        if request.can_read_body:
            try:
                data = await read_json_object(request, limit=4096, within=read_timeout)
            except BodyRefused as exc:
                return _json({"error": exc.reason}, exc.status)
        unknown = sorted(set(data) - PAGE_TEST_FIELDS)
        if unknown:
            return _json({"error": f"unknown field(s): {_names(unknown)}"}, 400)
        try:
            times = PageTestTimes.of(data.get("step_seconds"), data.get("wait_seconds"))
            alert = await router.page_tests.begin(times)
        except PageTestRunning as exc:
            return _json({"error": str(exc), "code": exc.code}, 409)
        except PageTestError as exc:
            return _json({"error": str(exc)}, 400)
        return _json(progress(alert, router.owner.tz), 202)

    async def read(request: web.Request) -> web.Response:
        code = request.match_info["code"].lstrip("#")
        alert = await router.store.by_code(code) if code.isdigit() else None
        if alert is None or not alert.test:
            return _json({"error": f"there is no test page #{code[:20]}"}, 404)
        return _json(progress(alert, router.owner.tz), 200)

    return ("POST", PAGE_TEST_PATH, begin), ("GET", PAGE_TEST_PATH + "/{code}", read)


API_SOURCE = "POST /api/alerts"
"""Where an alert posted from outside says its words came from."""


def _outside(value: Any) -> Any:
    """A text field of a posted alert as outside text (anything else as it came, for
    ``validate`` to refuse with a clear message)."""
    return Outside(value, API_SOURCE) if isinstance(value, str) else value


def _names(names: list[str], most: int = 5, width: int = 40) -> str:
    """A few of ``names``, each cut short: an error never echoes a huge request back."""
    shown = [n if len(n) <= width else n[: width - 1] + "…" for n in names[:most]]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(shown) + more


def _json(data: Any, status: int) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _alerts_command(router: AlertRouter, clock: Clock) -> Command:
    async def command(message: InboundMessage, ctx: RunContext) -> list[Reply]:
        """``/alerts``: what is open, one line each, with the codes to reply with."""
        alerts = await router.store.unresolved(limit=20)
        if not alerts:
            return [Reply("No open alerts.")]
        now, tz = clock(), router.owner.tz
        lines = [summary_line(alert, now, tz) for alert in alerts]
        hint = "Reply e.g. '#12 ack', '#12 snooze 1h' or '#12 resolve'."
        return [Reply("Open alerts:\n" + "\n".join(lines) + "\n\n" + hint)]

    return command


def alerting(options: AlertingOptions | None = None) -> Feature:
    """The feature with chosen options (tests: no timer loop, fixed policy)."""
    chosen = options or AlertingOptions()

    async def feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
        router = AlertRouter(
            ctx.database.db,
            ctx.outbox,
            ctx.reach,
            ctx.settings,
            ctx.clock,
            chosen.policy,
            owner=ctx.owner,
        )
        await router.start(background=chosen.background)
        try:
            read_timeout = ctx.settings.http_read_timeout_seconds
            routes: list[Route] = [("POST", "/api/alerts", _api_raise(router, read_timeout))]
            routes.extend(_api_page_test(router, read_timeout))
            for channel in ctx.channels.values():
                if isinstance(channel, PlacesCalls):  # key presses and call statuses
                    answer = channel.voice_webhook(router.calls.answer)
                    routes.append(("POST", VOICE_WEBHOOK, answer))

            async def status_section() -> dict[str, Any]:
                alerts = [alert.public() for alert in await router.open_alerts()]
                return {"alerts": alerts, "calls": router.calls.status().to_json()}

            log.info(
                "alerts: routing on (%s); %s",
                ", ".join(sorted(ctx.channels)) or "no channels",
                router.calls.status().words(),
            )
            yield Parts(
                tools=((RAISE_ALERT, always), (MANAGE_ALERTS, always)),
                commands={"/alerts": _alerts_command(router, ctx.clock)},
                interceptors=(lambda core: AlertReplies(router, core.agent),),
                routes=tuple(routes),
                # The alert a message is about changes with the message: in the note.
                prompt_sections=(reply_words_section, changing(alert_prompt_section)),
                status=(status_section,),
                services=Services(alerts=router),
                owner_listeners=router.owner_listeners,
            )
        finally:
            await router.stop()

    return feature


alerting_feature: Feature = alerting()
"""The default alerts feature, as listed in ``agent.app.features.FEATURES``."""
