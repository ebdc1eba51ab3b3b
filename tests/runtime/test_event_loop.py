"""Every command runs on uvloop when it is installed, and on asyncio's own loop when not."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import uvloop

from runtime import loop as event_loop
from tests.agent.cli.procs import free_port, run_env


def test_a_command_runs_on_uvloop() -> None:
    async def kind() -> type:
        return type(asyncio.get_running_loop())

    assert issubclass(event_loop.run(kind()), uvloop.Loop)


def test_without_uvloop_asyncio_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    assert event_loop.loop_factory() is None

    async def kind() -> type:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop())

    ran_on = event_loop.run(kind())
    assert not issubclass(ran_on, uvloop.Loop)
    assert issubclass(ran_on, asyncio.BaseEventLoop)


def test_an_error_comes_out_as_it_was_raised() -> None:
    async def fail() -> None:
        raise LookupError("no such chat")

    with pytest.raises(LookupError, match="no such chat"):
        event_loop.run(fail())


def test_watchkeeper_runs_its_commands_on_uvloop(tmp_path: Path) -> None:
    # `watchkeeper schedule` as a process: the loop it ran on, seen from inside.
    code = textwrap.dedent(
        """
        import asyncio, sys
        import agent.cli.upcoming as upcoming

        async def print_schedule(settings, hours):
            print(type(asyncio.get_running_loop()).__module__)
            return 0

        upcoming.print_schedule = print_schedule
        from agent.cli.main import main
        sys.argv = ["watchkeeper", "schedule"]
        sys.exit(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path, env=run_env(tmp_path, free_port()),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("uvloop")
