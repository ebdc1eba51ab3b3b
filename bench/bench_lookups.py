"""What the per-message lookups cost once the outbox and the inbox are large. Prints
its figures.

Every quoted Telegram reply asks which alert the quoted message carried, every
SMS/WhatsApp "k" asks what was last sent to that chat, every contact's message asks
how many that contact sent in the last minute, every pulse how many messages came since
the last one, and the model's WhatsApp read tool its contacts' last messages. The
outbox keeps every message ever sent and the inbox every one received, so each must
read only what it needs: alert-carrying messages (a sparse index), what was sent or
received within the window (``channels.delivery.inbox``).
Fills the embedded database with ``--messages`` sent and as many received messages,
one a minute, then times each lookup beside the same question asked as a plain filter
(which SecantusDB answers with a full scan).

Run: python bench/bench_lookups.py [--messages 10000]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.runs.briefs import is_news  # noqa: E402
from runtime.loop import run as run_app_loop  # noqa: E402
from storage import collections as c  # noqa: E402
from storage.db import open_database  # noqa: E402
from storage.repos.inbox import (  # noqa: E402
    STATUSES,
    Arrival,
    InboxRow,
    newest_received,
    received_since,
)
from storage.repos.sent_alerts import last_sent_alert, replied_alert  # noqa: E402

NOW = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
OWNER = "+15550100100"


def outbox_doc(i: int, total: int) -> dict[str, Any]:
    """Message ``i`` of ``total``, one a minute ending now: odd ones to the owner on
    Telegram (1 in 100 of all an alert), even ones on SMS (every 10th to the owner);
    the last one is an alert by SMS."""
    sent = NOW - timedelta(minutes=total - 1 - i)
    alert = i % 100 == 1 or i == total - 1
    return {
        "idempotency_key": f"alert:{i}:0:telegram" if alert else f"reply:{i}",
        "channel": "telegram" if i % 2 and i != total - 1 else "sms",
        "chat_id": "42"
        if i % 2 and i != total - 1
        else OWNER
        if i % 10 in (0, 9)
        else f"+1{i:010d}",
        "text": "a reply of ordinary length, as the agent writes them " * 3,
        "meta": {"alert_code": str(i)} if alert else {},
        "status": "sent",
        "attempts": 1,
        "created_at": sent,
        "next_attempt_at": sent,
        "sent_at": sent,
        "external_ids": [str(i)],
    }


def inbox_doc(i: int, total: int) -> dict[str, Any]:
    """Received message ``i`` of ``total``, one a minute ending now, from 40 senders."""
    return {
        "channel": "whatsapp",
        "external_id": str(i),
        "chat_id": f"+1{i % 40:010d}",
        "sender_id": f"+1{i % 40:010d}",
        "text": "a message of ordinary length, as people write them " * 2,
        "meta": {},
        "received_at": NOW - timedelta(minutes=total - 1 - i),
        "status": "done",
    }


async def timed(call: Callable[[], Awaitable[object]], runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def run(messages: int) -> None:
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        async with open_database(None, "bench", Path(tmp)) as database:
            db, outbox = database.db, database.db[c.OUTBOX]
            for start in range(0, messages, 1000):
                batch = range(start, min(start + 1000, messages))
                await outbox.insert_many([outbox_doc(i, messages) for i in batch])
            inbox = db[c.INBOX]
            for start in range(0, messages, 1000):
                batch = range(start, min(start + 1000, messages))
                await inbox.insert_many([inbox_doc(i, messages) for i in batch])
            quoted = "1"  # the oldest alert: a reply may quote one from long ago
            since = NOW - timedelta(minutes=30)
            found = await replied_alert(db, "telegram", "42", quoted)
            k = await last_sent_alert(db, "sms", [OWNER], since)
            reply_ms = await timed(lambda: replied_alert(db, "telegram", "42", quoted))
            k_ms = await timed(lambda: last_sent_alert(db, "sms", [OWNER], since))
            scan_reply = await timed(
                lambda: outbox.find_one(
                    {"channel": "telegram", "chat_id": "42", "external_ids": {"$in": [quoted]}}
                ),
                runs=3,
            )
            scan_k = await timed(
                lambda: outbox.find_one(
                    {"channel": "sms", "chat_id": {"$in": [OWNER]}, "status": "sent"},
                    sort=[("sent_at", -1), ("_id", -1)],
                ),
                runs=3,
            )
            minute, hours = NOW - timedelta(minutes=1, seconds=30), NOW - timedelta(hours=3)
            sender = inbox_doc(messages - 1, messages)["sender_id"]

            async def contact_rate() -> int:
                rows = received_since(inbox, minute, projection={"sender_id": 1})
                return sum([d.get("sender_id") == sender async for d in rows])

            async def pulse_news() -> int:
                news = [s for s in STATUSES if s != "failed"]
                rows = received_since(inbox, hours, statuses=news, projection={"text": 1})
                return sum([is_news(Arrival.from_doc(d)) async for d in rows])

            readable = {inbox_doc(i, messages)["sender_id"] for i in range(5)}

            async def whatsapp_read() -> int:
                def keep(row: InboxRow) -> bool:
                    return row.sender_id in readable

                return len(await newest_received(inbox, keep, 20, NOW))

            rate, news = await contact_rate(), await pulse_news()
            read_ms = await timed(whatsapp_read)
            scan_read = await timed(
                lambda: inbox.find(
                    {"channel": "whatsapp", "sender_id": {"$in": list(readable)}},
                    sort=[("received_at", -1)],
                    limit=20,
                ).to_list(),
                runs=3,
            )
            rate_ms, news_ms = await timed(contact_rate), await timed(pulse_news)
            scan_rate = await timed(
                lambda: inbox.count_documents(
                    {"channel": "whatsapp", "sender_id": sender, "received_at": {"$gt": minute}}
                ),
                runs=3,
            )
            scan_news = await timed(
                lambda: inbox.count_documents(
                    {"received_at": {"$gt": hours}, "status": {"$ne": "failed"}}
                ),
                runs=3,
            )
    print(f"outbox of {messages:,} sent messages (1 in 100 an alert):")
    print(
        f"  quoted reply -> its alert: {reply_ms:.1f} ms (full scan: {scan_reply:.0f} ms)"
        f"  [found: {found}]"
    )
    print(
        f"  SMS 'k' -> last alert sent to the chat: {k_ms:.1f} ms (full scan: {scan_k:.0f} ms)"
        f"  [found: {k}]"
    )
    print(f"inbox of {messages:,} received messages (one a minute, 40 senders):")
    print(
        f"  a contact's messages in the last minute: {rate_ms:.1f} ms"
        f" (full scan: {scan_rate:.0f} ms)  [{rate}]"
    )
    print(
        f"  pulse: news in the last 3 hours: {news_ms:.1f} ms (full scan: {scan_news:.0f} ms)"
        f"  [{news}]"
    )
    print(
        f"  the model reads its contacts' last 20 WhatsApp messages: {read_ms:.1f} ms"
        f" (sorted full scan: {scan_read:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    run_app_loop(run(parser.parse_args().messages))


if __name__ == "__main__":
    main()
