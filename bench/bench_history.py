"""A long chat's requests, without and with summaries (issue 40, items 9 and 11).

The whole app (``build_app``: embedded database, alerts, scheduling, web search, so every
owner tool but WhatsApp's is offered) and the chat of
``tests/agent/conversation/long_chat.py``: 61 everyday exchanges of realistic length,
every fourth with a lookup, the plumber's date agreed in the third, played by a scripted
model that is also the summariser. Each summary is waited for before the next message
(the owner reads and types meanwhile).

Printed for ``HISTORY_RECENT_TOKENS=0`` (no summaries: history cut at
``HISTORY_TOKEN_BUDGET``, 12,000) and for the default (3,000): the request of the 10th,
30th, 60th and last (``--exchanges``, 61) exchange in o200k tokens (system prompt,
messages with their notes, tool calls and results, tool schemas), whether the early
agreement is in the last, the summary calls made and what they were sent, all chat
requests' input together, and how many exchanges' first request repeated the previous
one's start (system prompt and history before its newest message: what the providers'
prompt caches match).

    .venv/bin/python bench/bench_history.py [--exchanges 61]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.app.core import build_app  # noqa: E402
from agent.app.features.alerts import AlertingOptions, alerting  # noqa: E402
from agent.app.features.scheduling import SchedulingOptions, scheduling  # noqa: E402
from tests.agent.conversation.long_chat import (  # noqa: E402
    AGREEMENT,
    carried,
    is_summary,
    owner_words,
    player,
    request_tokens,
)
from tests.conftest import make_settings  # noqa: E402
from tests.contexts import owner_ctx  # noqa: E402
from tests.fakes.scripted import Request, ScriptedModel  # noqa: E402

SHOWN = (10, 30, 60)


async def measure(recent_tokens: int, exchanges: int) -> str:
    settings = make_settings(
        data_dir=Path(tempfile.mkdtemp()),
        owner_telegram_ids=[42],
        brave_api_key="brave-test",
        timezone="Europe/Berlin",
        history_recent_tokens=recent_tokens,
    )
    model = ScriptedModel(lambda r: "")
    model.responder = player(model)
    features = [
        alerting(AlertingOptions(background=False)),
        scheduling(SchedulingOptions(timer=False)),
    ]
    sizes: dict[int, int] = {}
    firsts: list[Request] = []
    async with build_app(
        settings, model=model, channels=[], features=features, on_part=lambda _: None
    ) as app:
        summaries = app.agent.summaries
        assert summaries is not None
        for n in range(exchanges):
            first = len(model.requests)
            await app.agent.respond(owner_words(n), owner_ctx(app.deps))
            firsts.append(model.requests[first])
            if n + 1 in SHOWN or n + 1 == exchanges:
                sizes[n + 1] = request_tokens(model.requests[first])
            await summaries.settled()
    chat = [r for r in model.requests if not is_summary(r)]
    folds = [r for r in model.requests if is_summary(r)]
    last = chat[-1]
    kept = sum(starts_with(b, a) for a, b in itertools.pairwise(firsts))
    shown = ", ".join(f"{n}: {tokens:,}" for n, tokens in sizes.items())
    return (
        f"HISTORY_RECENT_TOKENS={recent_tokens}: request tokens at exchange {shown}; "
        f"agreement in the last: {'yes' if AGREEMENT in carried(last) else 'no'}; "
        f"{len(folds)} summary calls sent {sum(map(request_tokens, folds)):,} tokens; "
        f"{len(chat)} chat requests sent {sum(map(request_tokens, chat)):,} tokens; "
        f"{kept} of {len(firsts) - 1} exchanges began with the whole previous one's history"
    )


def starts_with(later: Request, earlier: Request) -> bool:
    """Whether ``later`` repeats ``earlier``'s system prompt and history (all but its
    newest message, whose note changes): what a provider's prompt cache can match."""
    history = earlier.messages[:-1]
    return later.system == earlier.system and later.messages[: len(history)] == history


async def main(args: argparse.Namespace) -> None:
    for recent in (0, 3_000):
        print(await measure(recent, args.exchanges), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--exchanges", type=int, default=61)
    asyncio.run(main(parser.parse_args()))
