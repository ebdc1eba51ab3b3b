"""The calls of ours one Telegram message travels through, from the long poll to
``sendMessage``, as the running app really makes them.

The whole app (``build_app``: embedded database, the Telegram channel, the OpenAI
adapter) runs against local fakes of the Bot API and of OpenAI. After one warm-up
message, a second one is traced: a profile hook notes, at the three places where the
message leaves a task or the process (the inbox write, the model request, the Bot API
call), the chain of our frames that led there. Printed in order, those chains are the
path; each step from one of our functions to the next is a hop. Calls that return
before the message moves on (conversions, look-ups) are on no chain and are listed in
``README.md`` beside the walk.

    python bench/bench_hops.py
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a plain script

from agent.app.core import build_app  # noqa: E402
from agent.config import Settings  # noqa: E402
from runtime.loop import run as run_app_loop  # noqa: E402
from tests.fakes.openai_api import FakeOpenAI  # noqa: E402
from tests.fakes.telegram_api import TOKEN, FakeTelegram  # noqa: E402

OURS = tuple(
    str(ROOT / package) for package in ("agent", "channels", "storage", "scheduler", "runtime")
)
LOOP = str(ROOT / "runtime" / "loop.py")  # the loop runner, not a hop
INLINE = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")
OWNER = 4242
MOMENTS = {
    "Intake.submit": "stored in the inbox before the offset moves on, and queued",
    "Pipeline._consume": "taken off the queue to the conversation's worker",
    "Turns.run": "the model request, built in turn",
    "OpenAIModel._post": "the request's own task",
    "Bot.send_message": "the Bot API call",
}
TASKS = (
    ("TelegramChannel._poll_loop", "TelegramChannel._take_chat"),
    ("Intake.submit", "Pipeline._consume"),
    ("Pipeline._consume", "Pipeline._work"),
    ("Turns.run", "OpenAIModel._post"),
)
"""Hand-offs to a new task (``gather``, ``create_task``, ``ensure_future``): the callee
starts on a stack of its own, so no chain shows its caller."""


def _ours(frame: FrameType) -> bool:
    name = frame.f_code.co_filename
    return name.startswith(OURS) and name != LOOP and frame.f_code.co_name not in INLINE


def _name(frame: FrameType) -> str:
    code = frame.f_code
    module = Path(code.co_filename).resolve().relative_to(ROOT)
    return f"{module}:{code.co_qualname}"


def _short(name: str) -> str:
    return name.rsplit(":", 1)[-1]


def _chain(frame: FrameType) -> list[str]:
    """Our frames from the task's first down to ``frame``'s caller, outermost first."""
    names: list[str] = []
    current: FrameType | None = frame.f_back
    while current is not None:
        if _ours(current):
            names.append(_name(current))
        current = current.f_back
    return names[::-1]


class Tracer:
    """While ``on``: the chain at each moment (once), and every call of ours by ours."""

    def __init__(self) -> None:
        self.on = False
        self.chains: list[tuple[str, list[str]]] = []
        self.calls: dict[tuple[str, str], None] = {}
        """Caller and callee, in the order first seen."""
        self._seen: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        caller = frame.f_back
        if _ours(frame) and caller is not None and _ours(caller):
            self.calls.setdefault((_name(caller), _name(frame)))
        qualname = frame.f_code.co_qualname
        if qualname in MOMENTS and qualname not in self._seen:
            self._seen.add(qualname)
            here = _name(frame) if _ours(frame) else qualname
            self.chains.append((MOMENTS[qualname], [*_chain(frame), here]))

    def report(self) -> None:
        path: dict[tuple[str, str], None] = {}
        for moment, chain in self.chains:
            print(f"{moment}:")
            for name in chain:
                print(f"    {name}")
            path.update(dict.fromkeys(itertools.pairwise(chain)))
        on_path = {name for _moment, chain in self.chains for name in chain}
        hops = [(a, b) for a, b in path if b in on_path and _short(b) != "Bot.send_message"]
        hops += [(a, b) for a, b in TASKS if any(_short(n) == b for n in on_path)]
        beside = [(a, b) for a, b in self.calls if a in on_path and b not in on_path]
        # Calls gathered as tasks (the agent's look-ups at the start of an exchange) run on
        # stacks of their own: they are not seen here.
        print(f"\nhops between our functions on the path: {len(hops)}")
        for a, b in hops:
            print(f"    {_short(a)} -> {_short(b)}")
        print(f"calls of ours made beside the path by its functions: {len(beside)}")
        for a, b in beside:
            print(f"    {_short(a)} -> {b}")


async def main() -> None:
    tracer = Tracer()
    with tempfile.TemporaryDirectory() as data:
        async with FakeTelegram() as telegram, FakeOpenAI() as openai:
            settings = Settings(
                _env_file=None,  # type: ignore[call-arg]
                data_dir=Path(data),
                llm_provider="openai",
                openai_api_key="sk-bench",
                openai_base_url=openai.base_url,
                telegram_bot_token=TOKEN,
                telegram_api_base_url=telegram.url,
                owner_telegram_ids=[OWNER],
            )
            async with build_app(settings, on_part=lambda _text: None):
                openai.reply_text("warm")
                telegram.push_text(OWNER, "first")
                await telegram.wait_sent(1, within=60)
                openai.reply_text("traced")
                sys.setprofile(tracer)
                tracer.on = True
                telegram.push_text(OWNER, "second")
                await telegram.wait_sent(2, within=60)
                tracer.on = False
                sys.setprofile(None)
    tracer.report()


if __name__ == "__main__":
    run_app_loop(main())
