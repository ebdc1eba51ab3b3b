"""``TWILIO_SEGMENTS_PER_SECOND`` paces the app's SMS channel: a long code (1 a second)
meets no refusal from a Twilio that refuses faster sending."""

from __future__ import annotations

import pytest

from tests.databases import AppDb
from tests.fakes.alert_app import alert_app
from tests.fakes.twilio_api import FakeTwilio


async def test_two_pages_at_once_go_a_second_apart_from_a_long_code(app_db: AppDb) -> None:
    async with FakeTwilio() as twilio:
        twilio.segment_pacing = True  # refuses a second segment within a second
        async with alert_app(app_db, twilio=twilio, twilio_segments_per_second=1) as h:
            await h.router.raise_alert(severity="critical", title="Router down")
            await h.router.raise_alert(severity="critical", title="Disk full")
        assert twilio.refusals == [] and len(twilio.sent) == 2
        first, second = (s.at for s in twilio.sent)
        assert second - first >= 1.0


def test_a_pace_of_nothing_or_of_thousands_is_refused() -> None:
    from pydantic import ValidationError

    from tests.conftest import make_settings

    for wrong in (0, -1, 5000):
        with pytest.raises(ValidationError, match="twilio_segments_per_second"):
            make_settings(twilio_segments_per_second=wrong)
