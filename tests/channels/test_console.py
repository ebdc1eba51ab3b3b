"""``watchkeeper chat``: the terminal channel through the whole app, twice on one DATA_DIR."""

from __future__ import annotations

import io
from pathlib import Path

from agent.app.core import build_app
from channels.console import ConsoleChannel
from tests.conftest import make_settings
from tests.fakes.scripted import Request, ScriptedModel


def _lines(*lines: str):  # type: ignore[no-untyped-def]
    pending = list(lines)

    def read_line() -> str:
        if not pending:
            raise EOFError
        return pending.pop(0)

    return read_line


def _recall(req: Request) -> str:
    said = [m.text for m in req.messages if m.role == "user"]
    return f"{len(said)} turn(s): " + " / ".join(said)


async def _session(data_dir: Path, *lines: str) -> tuple[str, ScriptedModel]:
    settings = make_settings(data_dir=data_dir, openai_api_key="k")
    out = io.StringIO()
    console = ConsoleChannel(out=out, read_line=_lines(*lines))
    model = ScriptedModel(_recall)
    async with build_app(settings, model=model, channels=[console]) as app:
        await console.closed.wait()
        await app.pipeline.join()
    return out.getvalue(), model


async def test_chat_thinks_answers_resets_and_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first, _ = await _session(data, "my name is Ada", "what is my name?")
    assert "… thinking" in first
    assert "watchkeeper> 2 turn(s): my name is Ada / what is my name?" in first

    second, _ = await _session(data, "still there?", "/reset", "fresh start")
    assert "watchkeeper> 3 turn(s): my name is Ada / what is my name? / still there?" in second
    assert "Started a new conversation" in second
    assert "watchkeeper> 1 turn(s): fresh start" in second
