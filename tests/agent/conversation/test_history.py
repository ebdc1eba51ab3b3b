"""The token estimate that budgets history: never under the real count, never far over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.conversation.history import estimate_tokens, fit_history
from agent.llm.types import assistant_message, user_message
from tests.tokens import count_tokens

ROOT = Path(__file__).resolve().parents[3]

SAMPLES = {
    "english prose": (ROOT / "README.md").read_text(),
    "python code": (ROOT / "agent" / "conversation" / "agent.py").read_text(),
    "extended json rows": json.dumps(
        [
            {
                "_id": {"$oid": "6b07b29b99004be03de519fa"},
                "name": "Ada",
                "n": i,
                "created": {"$date": "2026-11-26T05:00:00Z"},
            }
            for i in range(30)
        ]
    ),
    "german": "Erinnere mich bitte jeden Werktag um neun Uhr daran, die Datensicherungen "
    "zu überprüfen. Außerdem möchte ich wöchentlich eine Zusammenfassung. " * 8,
    "russian": "Пожалуйста, напоминай мне каждый будний день в девять утра проверять "
    "резервные копии. " * 8,
    "chinese": "请每个工作日早上九点提醒我检查备份。另外，我希望每周收到一份未付发票的摘要。" * 8,
    "emoji": "ok 👍 thanks 🙏 see you 😀 " * 20,
    "short chat": "hi! can you remind me tomorrow at 9 to call mum?",
    "numbers": "order 1234567890 shipped 2026-11-26 at 09:45, total 1,299.95 EUR",
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_estimate_is_safe_and_close(name: str) -> None:
    text = SAMPLES[name]
    real, estimate = count_tokens(text), estimate_tokens(text)
    assert real <= estimate <= 1.6 * real + 2, (real, estimate)


def test_empty_text_is_zero() -> None:
    assert estimate_tokens("") == 0


def test_history_is_cut_where_a_block_begins_so_its_start_stays_put() -> None:
    """Ten tokens a message, a budget of 200, one exchange (two messages) at a time: the
    tightest fit starts one exchange later every time; cut where blocks of 10 messages
    begin, the start holds for five exchanges, always at a user message, within budget."""
    starts, tightest = [], []
    for length in range(22, 82, 2):
        messages = [
            user_message(f"u{i}") if i % 2 == 0 else assistant_message(f"a{i}")
            for i in range(length)
        ]
        kept = fit_history(messages, [10] * length, 200, seqs=list(range(length)), every=10)
        assert kept[0].role == "user" and len(kept) <= 20
        starts.append(kept[0].text)
        tightest.append(fit_history(messages, [10] * length, 200)[0].text)  # no seqs
    assert len(starts) == 30 and len(set(starts)) <= 7, starts
    assert len(set(tightest)) == 30
