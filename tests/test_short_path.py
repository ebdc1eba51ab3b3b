"""The way from the long poll to ``sendMessage`` stays short (``bench/bench_hops.py``).

A text message and a cron fire are traced through the whole app (embedded database,
the Telegram channel, the OpenAI adapter, the scheduler) against local fakes: every
function of ours the work waits in, from the poll's return (the timer) to the Bot API's
``send_message``. Before the short path a message waited in 67 functions and a cron
fire in 75 (now 46 and 56, the intake's queue and the pace included); these bounds
keep what was taken out from coming back.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

MESSAGE_HOPS = 54
CRON_HOPS = 64
"""Room for the look-ups a slow machine adds: a cached document (the system
instruction, the pulse settings, the alert hint) read again once its few seconds pass."""


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "bench_hops.py"
    spec = importlib.util.spec_from_file_location("bench_hops", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
async def test_a_message_and_a_cron_fire_reach_the_send_through_few_functions(
    tmp_path: Path,
) -> None:
    message, cron = await _bench().walks(tmp_path)
    walked = [*message.entered, *message.helpers, *cron.entered, *cron.helpers]
    passed = {name.rsplit(":", 1)[-1] for name in walked}
    # What added nothing is not passed through any more.
    for gone in (
        "Pipeline._burst_of",
        "envelope_of",
        "GroupCommit._alone",
        "confirm_held_send",
        "ResilientModel._with_retries",
        "transcribe_pending",
        "TokenBudget.blocked",
        "TokenBudget._check_raised",
        "ToolCatalog.until_ready",
        "fetch_pending",
    ):
        assert gone not in passed, gone
    assert len(message.entered) <= MESSAGE_HOPS, list(message.entered)
    assert len(cron.entered) <= CRON_HOPS, list(cron.entered)
