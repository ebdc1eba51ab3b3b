"""Alert routing benchmark (issue 5). Prints its figures.

1. 1,000 alerts over 100 dedupe keys (20 keys critical, 30 warning, 50 info) through
   the real router on the embedded database, a chat channel that answers at once and
   the SMS channel against a local fake Twilio: routing decisions per second (new and
   repeated alerts), and SMS actually sent (the hourly budget caps the pages).
2. One escalation pass 15 minutes later: the critical alerts want their second page.
3. The directive parser on 10,000 replies (bench/bench_directives.py): µs per parse.

Run: python bench/bench_alerts.py
"""

from __future__ import annotations

import itertools
import logging
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_directives import main as directives_main  # noqa: E402

from agent.alerts.policy import RoutingPolicy  # noqa: E402
from agent.alerts.router import AlertRouter  # noqa: E402
from agent.app.registry import reach  # noqa: E402
from agent.config import Settings  # noqa: E402
from agent.reach import Owners  # noqa: E402
from channels.delivery.outbox import Outbox  # noqa: E402
from channels.sms import SmsChannel  # noqa: E402
from channels.types import Channel, InboundMessage, OutboundMessage, SendResult  # noqa: E402
from runtime.loop import run as run_app_loop  # noqa: E402
from storage.db import open_database  # noqa: E402
from tests.fakes.twilio_api import FakeTwilio  # noqa: E402

ALERTS = 1_000
KEYS = 100
OWNER = "+15550100100"


class InstantChat:
    """A chat transport that accepts every message at once (measures our side only)."""

    name = "telegram"

    def __init__(self) -> None:
        self.sent = 0
        self._ids = itertools.count(1)

    async def start(self, sink: Any) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.sent += 1
        return SendResult(external_ids=(str(next(self._ids)),))

    async def typing(self, chat_id: str) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"connected": True}


def severity_of(key: int) -> str:
    return "critical" if key < 20 else "warning" if key < 50 else "info"


async def _sink(_message: InboundMessage) -> bool:
    return True


async def run() -> None:
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("secantus").setLevel(logging.CRITICAL)  # beta server's shutdown noise
    now = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
    clock = lambda: now  # noqa: E731
    values: dict[str, Any] = {
        "owner_phone": OWNER,
        "owner_telegram_ids": [1],
        "openai_api_key": "sk-bench",
    }
    settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeTwilio() as fake, open_database(None, "bench", Path(tmp)) as database:
            chat = InstantChat()
            sms = SmsChannel(
                fake.account_sid, fake.auth_token, "+15550199999", api_base_url=fake.url
            )
            await sms.start(_sink)
            channels: dict[str, Channel] = {"telegram": chat, "sms": sms}
            outbox = Outbox(database.db, channels, clock)
            reached = reach(Owners(settings), channels)
            router = AlertRouter(database.db, outbox, reached, settings, clock, RoutingPolicy())
            new_times: list[float] = []
            repeat_times: list[float] = []
            started = time.perf_counter()
            for n in range(ALERTS):
                key = n % KEYS
                t0 = time.perf_counter()
                alert = await router.raise_alert(
                    severity=severity_of(key),
                    title=f"Check {key} failing",
                    body="synthetic",
                    dedupe_key=f"check:{key}",
                    source="bench",
                )
                (repeat_times if alert.deduplicated else new_times).append(time.perf_counter() - t0)
            total = time.perf_counter() - started
            sms_first, chat_first = len(fake.sent), chat.sent
            now += timedelta(minutes=15)
            t0 = time.perf_counter()
            steps = await router.tick(now)
            tick_s = time.perf_counter() - t0
            await sms.stop()
            print(f"alerts: {ALERTS} over {KEYS} dedupe keys (20 critical, 30 warning, 50 info)")
            print(
                f"  routing decisions: {ALERTS / total:,.0f}/s overall; "
                f"new alert {sum(new_times) / len(new_times) * 1e3:.2f} ms "
                f"({len(new_times)}), repeat {sum(repeat_times) / len(repeat_times) * 1e3:.2f} ms "
                f"({len(repeat_times)})"
            )
            print(
                f"  messages: {chat_first} chat (100 alerts + 1 budget notice), "
                f"{sms_first} SMS actually sent "
                f"(20 pages wanted, budget {router.policy.sms_per_hour}/hour)"
            )
            print(
                f"  escalation pass at +15 min: {steps} timers in {tick_s * 1e3:.0f} ms, "
                f"SMS sent now {len(fake.sent)} (budget still exhausted, so "
                f"{chat.sent - chat_first} pages went to chat)"
            )
    directives_main()


if __name__ == "__main__":
    run_app_loop(run())
