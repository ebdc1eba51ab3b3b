"""``watchkeeper run`` killed (SIGKILL) while a one-time reminder's run waits on the model,
then started again at once, as systemd's ``Restart=`` does: the reminder reaches the
owner once, shortly after the restart; its run is closed and the job kept as done.

A real process on the embedded database, against the fake Bot API and a fake OpenAI
model that holds the reminder's first request (a model slow to answer).
"""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pymongo import AsyncMongoClient

from tests.agent.cli.procs import free_port, run_env, start
from tests.agent.cli.procs import until_while_running as until
from tests.fakes.fixtures import fake
from tests.fakes.openai_api import FakeOpenAI, words_of
from tests.fakes.scripted_server import Recorded
from tests.fakes.telegram_api import TOKEN, FakeTelegram

__all__ = ["fake"]  # a fixture, imported for pytest

Doc = dict[str, Any]
OWNER = 4242
REMINDER = "Time to stretch!"


class ReminderModel(FakeOpenAI):
    """Sets a reminder a few seconds ahead when asked (again, as a model corrects itself,
    when a busy machine took longer than that and the tool says it is past); holds the
    reminder's first run until ``let_go``; answers its later runs."""

    def __init__(self) -> None:
        super().__init__()
        self.held = asyncio.Event()
        self.let_go = asyncio.Event()
        self.corrected = 0

    def set_reminder(self) -> None:
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
        args = {"action": "create", "name": "Stretch", "instruction": "Remind me to stretch",
                "run_at": at.isoformat()}  # fmt: skip
        self.reply_tool_calls(("manage_cronjob", args))

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        last = body["messages"][-1]
        text = words_of(last)
        if last["role"] == "tool" and "is in the past" in text:
            self.corrected += 1
            self.set_reminder()
        elif last["role"] == "tool":
            self.reply_text("Reminder set.")
        elif "Scheduled job" in text and not self.held.is_set():
            self.requests.append(Recorded(request.method, request.path, {}, body))
            self.held.set()
            await self.let_go.wait()  # the process asking has been killed by then
            return web.json_response({"error": {"message": "gone"}}, status=503)
        elif "Scheduled job" in text:
            self.reply_text(REMINDER)
        else:  # the owner's request: a one-time job a few seconds from now
            self.set_reminder()
        return await super().answer(request)


async def closed(data_dir: Path, within: float, proc: subprocess.Popen[str]) -> tuple[Doc, Doc]:
    """The reminder's run record and job once the run is closed and the job done, read
    from the running process's (embedded) database."""
    uri = (data_dir / "db.uri").read_text().strip()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, directConnection=True, tz_aware=True)
    found: list[Doc | None] = [None, None]

    async def look() -> None:
        db = client["watchkeeper"]
        found[:] = [await db["runs"].find_one({"kind": "cron"}), await db["cronjobs"].find_one()]

    def over() -> bool:
        run, job = found
        return bool(run and job and run["status"] != "running" and job.get("done_at"))

    try:
        deadline = asyncio.get_running_loop().time() + within
        await look()
        while not over():
            await until(lambda: True, within, "", proc)  # fails at once if it exited
            assert asyncio.get_running_loop().time() < deadline, f"not closed: {found}"
            await asyncio.sleep(0.05)
            await look()
    finally:
        await client.close()
    run, job = found
    assert run is not None and job is not None
    return run, job


@pytest.mark.timeout(180)  # two starts of a real process on a busy machine
async def test_a_reminder_killed_mid_run_is_delivered_once_after_an_immediate_restart(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    request = fake.push_text(OWNER, "remind me to stretch in a moment")
    async with ReminderModel() as model:
        env = run_env(
            tmp_path,
            free_port(),
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=fake.url,
            OPENAI_BASE_URL=model.base_url,
            OWNER_TELEGRAM_IDS=str(OWNER),
            NO_PROXY="127.0.0.1,localhost",
        )
        first = start(env, tmp_path)
        try:
            await until(model.held.is_set, 60, "reminder run", first)
            acknowledged = lambda: request["update_id"] in fake.confirmed  # noqa: E731
            await until(acknowledged, 30, "acknowledged update", first)
            first.kill()  # SIGKILL: the run is cut off with nothing recorded
            await asyncio.to_thread(first.wait, 10)
        finally:
            if first.poll() is None:
                first.kill()
        assert [s.visible for s in fake.sent] == ["Reminder set."]

        second = start(env, tmp_path)  # at once
        try:
            reminders = lambda: [s.visible for s in fake.sent if REMINDER in s.visible]  # noqa: E731
            await until(reminders, 60, "reminder", second)  # within a minute of the restart
            run, job = await closed(tmp_path / "data", 30, second)
            second.terminate()
            output, _ = await asyncio.to_thread(second.communicate, timeout=30)
        finally:
            if second.poll() is None:
                second.kill()
            model.let_go.set()
    assert second.returncode == 0, output
    assert reminders() == [f"Stretch\n{REMINDER}"]
    assert (run["status"], run["attempts"], run["resumed"]) == ("success", 2, True)
    assert (job["last_status"], job["enabled"]) == ("success", False)
    # asked, answered (after any correction), held, then the try that delivered
    assert len(model.requests) == 4 + model.corrected
