"""Wires SMS (Twilio) into the app: the channel and its webhook.

Runs from the SMS entry of the channel registry (``agent.app.registry``) when the three
Twilio settings are present, before the other features (the alert router pages through
it, and mounts the webhook of the calls it places); ``channels.sms`` (and the Twilio
SDK with it) is imported only then.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from agent.app.application import Feature, FeatureContext, Parts
from agent.config import Settings
from channels.registry import ChannelName
from storage.repos.sms_budget import take_sms

log = logging.getLogger(__name__)
SMS_WEBHOOK = "/webhooks/twilio/sms"


def _warn_sms(settings: Settings) -> None:
    log.info("channel: sms (twilio%s)", ", custom API" if settings.twilio_api_base_url else "")
    if not settings.owner_phone:
        log.warning("sms: OWNER_PHONE is not set, so no SMS alerts can be sent")
    if not settings.public_base_url:
        log.warning(
            "sms: PUBLIC_BASE_URL is not set, so inbound SMS are refused (their signatures "
            "cannot be checked); set it to the public URL Twilio calls"
        )


def make_sms_feature() -> Feature:
    """The feature (``agent.app.registry`` makes each channel's feature alike)."""
    return sms_feature


async def sms_feature(ctx: FeatureContext) -> AsyncIterator[Parts]:
    """The Twilio channel when configured, unless one was passed in (a test's, which
    mounts its own webhook)."""
    settings = ctx.settings
    if ChannelName.SMS in ctx.channels:
        yield Parts()
        return
    from channels.sms import SmsChannel

    assert settings.twilio_auth_token is not None  # checked by the entry's rules
    db, clock = ctx.database.db, ctx.clock
    sms = SmsChannel(
        settings.twilio_account_sid or "",
        settings.twilio_auth_token.get_secret_value(),
        settings.twilio_from_number or "",
        api_base_url=settings.twilio_api_base_url,
        public_base_url=settings.public_base_url,
        read_timeout=settings.http_read_timeout_seconds,
        clock=clock,
        budget=lambda: take_sms(db, clock(), settings.sms_per_hour),
    )
    await ctx.add_channel(sms)
    try:
        _warn_sms(settings)
        # Its calls' webhook is mounted by the alert router's feature, which answers it.
        yield Parts(routes=(("POST", SMS_WEBHOOK, sms.handle_webhook),))
    finally:
        await sms.stop()
