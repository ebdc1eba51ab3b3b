"""Button presses: Approve / Cancel on a held-call question, Ack / Snooze 1h / Resolve
on an alert (Telegram's inline keyboards; ``channels.registry.Delivery.buttons``).

A press is the owner's typed word in one tap, applied by the same code: "approve CODE"
and "cancel CODE" (``agent.conversation.held_sends``), and the alert router's
``apply`` with the actor ``owner via telegram button`` (a typed "ack" is ``owner via
telegram``), so the alert's history says how.

Guarantees:

1. Once. A press is claimed before it is applied, in the settings collection under
   the message it sits on and its data; another press of it (a double tap, a callback
   replayed) finds the claim, changes nothing and is answered "Already done". The same
   press handled again after a crash (the same stored message) goes on: what it
   applies is itself applied once (a held group is spent once, an alert changes state
   once).
2. The owner's only. Anyone else's press changes nothing; it is logged and answered
   that only the owner may (``refuse_press``; the dispatcher asks before anything).
3. Checked. Data not in the form our buttons carry (``channels.types.Press``), or
   naming no action we know, changes nothing and is answered so.
4. Said. The press is answered with a short notice, and the message it sat on is
   edited to say what was done, by whom and when, without its buttons
   (``channels.types.PRESS_ANSWER``). A press that changed nothing (the alert was
   acknowledged already, the held calls expired) is answered and leaves the message.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from agent.alerts.directives import Ack, Directive, Resolve, Snooze
from agent.alerts.policy import ALERT_PRESS, local_time
from agent.context import RunContext
from agent.conversation.held_sends import confirm_held_send
from agent.tools.catalog import ToolCatalog
from agent.tools.sending import HELD_PRESS
from channels.types import PRESS_ANSWER, PRESSED, InboundMessage, Press, Reply
from storage.repos.held_sends import HeldSends
from storage.repos.press_claims import PressClaims

log = logging.getLogger(__name__)

CLAIM_KEPT = timedelta(days=30)
"""How long a press is remembered: far longer than Telegram offers a callback again."""
NOT_OWNER = "Only the owner can use these buttons. Nothing was changed."
UNKNOWN = "This button is not one I know. Nothing was changed."
PRESSED_BEFORE = "Already done"


@dataclasses.dataclass(frozen=True)
class Done:
    """What a press did: ``changed`` when it applied something; ``notice`` for the
    pressing phone, ``detail`` the outcome in full (under the "... by you at" line)."""

    changed: bool
    notice: str
    detail: str = ""


Action = Callable[[str, InboundMessage, RunContext, ToolCatalog | None], Awaitable[Done]]


def is_press(message: InboundMessage) -> bool:
    """Whether ``message`` is a button press rather than words."""
    return message.meta.get("kind") == PRESSED


def refuse_press(message: InboundMessage) -> list[Reply]:
    """A press by someone who is not the owner: logged, answered, nothing changed."""
    log.warning(
        "refused a %s button press by %s (not the owner); nothing changed",
        message.channel,
        message.sender_id,
    )
    return [_answer(message, NOT_OWNER)]


def pressing(
    catalog: ToolCatalog | None,
) -> Callable[[InboundMessage, RunContext], Coroutine[Any, Any, list[Reply]] | None]:
    """The interceptor for the owner's presses (held calls made with the tools of
    ``catalog``); anything else is declined at once (None, no coroutine)."""

    def press(message: InboundMessage, ctx: RunContext) -> Coroutine[Any, Any, list[Reply]] | None:
        return _pressed(message, ctx, catalog) if is_press(message) else None

    return press


async def _pressed(
    message: InboundMessage, ctx: RunContext, catalog: ToolCatalog | None
) -> list[Reply]:
    press = Press.parse(message.text)
    action = ACTIONS.get((press.kind, press.action)) if press is not None else None
    if press is None or action is None:
        log.warning("a button press with data we never sent (%d bytes)", len(message.text))
        return [_answer(message, UNKNOWN)]
    before = await _claim(message, press, ctx)
    if before is not None:
        return [_answer(message, before)]
    done = await action(press.code, message, ctx, catalog)
    await _settle(message, press, ctx, done)
    if not done.changed:
        return [_answer(message, done.notice)]
    when = local_time(ctx.now, ctx.now, ctx.tz)
    text = f"{done.notice} by you at {when}"
    return [_answer(message, done.notice, text + (f"\n{done.detail}" if done.detail else ""))]


def _key(message: InboundMessage, press: Press) -> str:
    return f"press:{message.channel}:{message.chat_id}:{message.reply_to}:{press.data}"


async def _claim(message: InboundMessage, press: Press, ctx: RunContext) -> str | None:
    """Claim the press (guarantee 1); None when it is ours to apply, else the answer
    for a press made before."""
    before = await PressClaims(ctx.deps.db).claim(
        _key(message, press), ctx.inbox_id, ctx.now, CLAIM_KEPT
    )
    if before is None:
        return None
    if ctx.inbox_id is not None and before.inbox_id == ctx.inbox_id:
        return None  # this very press, handled again after a crash
    log.info("a %s button pressed again (%s); nothing changed", message.channel, press.data)
    pressed, notice = before.pressed_at, before.notice
    when = f" at {local_time(pressed, ctx.now, ctx.tz)}" if pressed is not None else ""
    return f"{PRESSED_BEFORE}{when}" + (f": {notice}." if notice else ".")


async def _settle(message: InboundMessage, press: Press, ctx: RunContext, done: Done) -> None:
    """Keep what the press did with its claim, for the answer to a second press."""
    await PressClaims(ctx.deps.db).settle(_key(message, press), done.notice)


def _answer(message: InboundMessage, notice: str, edited: str | None = None) -> Reply:
    """The answer to the press: ``notice`` on the phone; with ``edited``, the message it
    sat on rewritten to add it, its buttons gone."""
    answer = {
        "query_id": str(message.meta.get("callback_query_id") or ""),
        "notice": notice,
        "edit": message.reply_to if edited is not None else None,
        "shown": message.meta.get("shown"),
    }
    return Reply(edited if edited is not None else notice, meta={PRESS_ANSWER: answer})


# -- held calls ------------------------------------------------------------------------


async def _held(
    word: str, verb: str, code: str, message: InboundMessage, ctx: RunContext,
    catalog: ToolCatalog | None,
) -> Done:  # fmt: skip
    """``word CODE`` typed, in one tap: the same function answers it."""
    mine = await _spent_by_this(code, ctx)
    if not mine and await HeldSends(ctx.deps.db).waiting(code, ctx.now) is None:
        return Done(False, f"Nothing is waiting for {code} any more (answered or expired)")
    typed = dataclasses.replace(message, text=f"{word} {code}")
    replies = await confirm_held_send(typed, ctx, catalog) or []
    return Done(True, verb, "\n".join(r.text for r in replies))


async def _spent_by_this(code: str, ctx: RunContext) -> bool:
    """Whether this stored press already approved ``code`` (handled again after a crash)."""
    if ctx.inbox_id is None:
        return False
    return await HeldSends(ctx.deps.db).spent_by(code, ctx.inbox_id, ctx.now) is not None


async def _approve(
    code: str, message: InboundMessage, ctx: RunContext, catalog: ToolCatalog | None
) -> Done:
    return await _held("approve", "✅ Approved", code, message, ctx, catalog)


async def _cancel(
    code: str, message: InboundMessage, ctx: RunContext, catalog: ToolCatalog | None
) -> Done:
    return await _held("cancel", "✖️ Cancelled", code, message, ctx, catalog)


# -- alerts ----------------------------------------------------------------------------


def _alert(directive: Directive, verb: str) -> Action:
    async def apply(
        code: str, message: InboundMessage, ctx: RunContext, catalog: ToolCatalog | None
    ) -> Done:
        router = ctx.deps.alerts
        if router is None:
            return Done(False, "Alerts are off here. Nothing was changed.")
        outcome = await router.apply(code, directive, f"owner via {message.channel} button")
        return Done(outcome.changed, verb if outcome.changed else outcome.text, outcome.text)

    return apply


ACTIONS: Mapping[tuple[str, str], Action] = MappingProxyType(
    {
        (HELD_PRESS, "ok"): _approve,
        (HELD_PRESS, "no"): _cancel,
        (ALERT_PRESS, "ack"): _alert(Ack(), "✅ Acknowledged"),
        (ALERT_PRESS, "snz"): _alert(Snooze(timedelta(hours=1)), "💤 Snoozed for 1h"),
        (ALERT_PRESS, "res"): _alert(Resolve(), "✔️ Resolved"),
    }
)
"""Each press we send (``Press.kind``, ``Press.action``) and what it does."""
