"""``watchkeeper`` command line: run, chat, doctor, schedule, whatsapp link, pair,
page-test.

Every command runs on ``runtime.loop.run`` (uvloop where it is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from runtime.loop import run
from storage.embedded.spare import SpareServer
from storage.embedded.spare import wanted as spare_wanted

if TYPE_CHECKING:
    from agent.config import Settings
    from storage.embedded.owner import EmbeddedServer

log = logging.getLogger("watchkeeper")
T = TypeVar("T")


async def _run(settings: Settings, spare: SpareServer | None = None) -> int:
    from agent.app.listen import bind
    from agent.cli.run_lock import hold_run_lock
    from agent.config import ensure_data_dir
    from agent.llm.factory import check_model  # light: no SDK (agent.llm.lazy_sdk)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # A missing key stops start-up before anything exists, DATA_DIR included.
    check_model(settings)
    ensure_data_dir(settings.data_dir)  # the run lock lives there, whatever the database
    async with contextlib.AsyncExitStack() as stack:
        # Before any part starts: a second run on this DATA_DIR is refused here, and
        # so are a bad HTTP_HOST and a port in use.
        stack.enter_context(hold_run_lock(settings.data_dir))
        sockets = bind(settings.http_host, settings.http_port)
        for sock in sockets:
            stack.callback(sock.close)
        embedded = _launch_database(settings, spare)
        if embedded is not None:
            stack.push_async_callback(embedded.stop)  # after the app (build_app leaves it)
        # The database boots (on a thread, or in its process) while the model's and the
        # channels' modules load; build_app loads the database client's once the first
        # long poll is out, and the agent's once what the channels read can be stored.
        from agent.app.core import build_app
        from agent.cli.command import cli_command

        app = await stack.enter_async_context(
            build_app(settings, embedded=embedded, cli=cli_command())
        )
        # The HTTP server's and the dashboard's modules off the event loop, which is storing
        # updates (jinja2 loads later, on the dashboard's first page).
        await asyncio.to_thread(importlib.import_module, "agent.app.http")
        from agent.app.http import make_web_app, serve

        port = await stack.enter_async_context(
            serve(make_web_app(app), sockets, header_timeout=settings.http_read_timeout_seconds)
        )
        log.info("http: listening on %s:%d", settings.http_host, port)
        # Start-up's objects out of the collector's sight (``runtime.heap``). Then the
        # model's SDK loads, in a thread, and its objects go the same way: the first
        # answer does not wait for it (a few tenths of a second), and an agent that
        # answers holds it anyway (13 MiB for OpenAI's).
        from runtime.heap import freeze_heap, tune_collector
        from runtime.tasks import stop_task

        freeze_heap()
        tune_collector()
        freezing = asyncio.create_task(_then(app.agent.load_model(), freeze_heap), name="freeze")
        stack.push_async_callback(stop_task, freezing)
        log.info("%s", dashboard_line(settings, port))
        log.info("watchkeeper is running; Ctrl-C to stop")
        await stop.wait()
        log.info("stopping")
    log.info("stopped")
    return 0


async def _then(first: Awaitable[None], call: Callable[[], object]) -> None:
    await first
    call()


def dashboard_line(settings: Settings, port: int) -> str:
    """Where the owner's dashboard is, as the start-up log says it."""
    host = settings.http_host
    if host in ("0.0.0.0", "::", ""):  # every address: this machine's own works
        host = "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    if settings.admin_token is None:
        return f"dashboard: {url} needs ADMIN_TOKEN in .env (at least 16 characters)"
    return f"dashboard: {url} (token in .env)"


def _launch_database(settings: Settings, spare: SpareServer | None) -> EmbeddedServer | None:
    """The embedded server, already starting, when ``MONGODB_URI`` is unset."""
    if not settings.embedded_db:
        if spare is not None:
            spare.dismiss()  # MONGODB_URI came from .env: the spare was started for nothing
        return None
    from storage.embedded.owner import EmbeddedServer

    server = EmbeddedServer(
        settings.data_dir,
        idle_timeout=settings.embedded_db_idle_timeout_seconds,
        separate_process=settings.embedded_db_separate_process,
    )
    server.launch(spare)
    return server


async def _chat(settings: Settings) -> int:
    from agent.app.core import build_app
    from agent.cli.command import cli_command
    from channels.console import ConsoleChannel

    console = ConsoleChannel()
    print("Watchkeeper chat. /reset starts a new conversation, /quit leaves.", flush=True)
    async with build_app(
        settings,
        channels=[console],
        on_part=log.debug,
        exclusive_transports=False,
        cli=cli_command(),
    ) as app:
        await console.closed.wait()
        await app.pipeline.join()
    return 0


DESCRIPTION = (
    "Watchkeeper: a personal agent on Telegram, WhatsApp and SMS that pages you when "
    "something needs you. `doctor` says what is missing; `run` starts everything configured."
)
"""What ``--help`` says first: for the owner (how it runs inside is in the docstring)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="watchkeeper", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="start everything configured")
    sub.add_parser("chat", help="chat with the agent in the terminal")
    sub.add_parser("doctor", help="check settings and reachability")
    sched = sub.add_parser("schedule", help="print upcoming pulses and cron fires")
    sched.add_argument("--hours", type=float, default=24.0)
    wa = sub.add_parser("whatsapp", help="WhatsApp account")
    wa_sub = wa.add_subparsers(dest="wa_command", required=True)
    link = wa_sub.add_parser("link", help="link a WhatsApp account")
    link.add_argument("--phone", help="E.164 number: show a pairing code instead of a QR")
    pair = sub.add_parser("pair", help="approve a Telegram pairing code (make its sender an owner)")
    pair.add_argument("code", nargs="?", help="the 6-digit code the bot sent")
    pair.add_argument("--list", action="store_true", help="show owners and pending codes")
    pair.add_argument(
        "--new",
        action="store_true",
        help="print a code to send to the bot yourself (strangers cannot block it)",
    )
    pair.add_argument(
        "--remove", type=int, metavar="USER_ID", help="unpair an owner (their Telegram user id)"
    )
    test = sub.add_parser(
        "page-test", help="send a test page (chat, SMS, call) and wait for your acknowledgement"
    )
    test.add_argument(
        "--wait", type=_duration, default=300.0, help="how long to wait for an ack (default 300s)"
    )
    test.add_argument(
        "--step",
        type=_duration,
        default=60.0,
        help="how long each step waits for an ack before the next (default 60s)",
    )
    return parser


def _duration(text: str) -> float:
    from agent.cli.page_test import duration_arg

    try:
        return duration_arg(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _uses_data_dir(command: str, settings: Settings) -> bool:
    """The embedded database and WhatsApp keep their data there. ``run`` and ``chat``
    check it themselves once the model is known (a missing key stops them before
    anything exists); ``doctor`` reports a bad one among its checks."""
    if command == "whatsapp":
        return True
    if command == "pair":
        return settings.embedded_db
    return command == "schedule" and (settings.embedded_db or settings.whatsapp_enabled)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # A database asked for in a process of its own loads while the settings do
    # (``storage.embedded.spare``): so nothing above imports them.
    spare = SpareServer.start() if args.command == "run" and spare_wanted() else None
    try:
        return _command(args, spare)
    finally:
        if spare is not None:
            spare.dismiss()  # not needed after all (or already handed its store)


def _command(args: argparse.Namespace, spare: SpareServer | None) -> int:
    from agent.cli.logs import setup_logging
    from agent.cli.run_lock import AlreadyRunning
    from agent.config import ConfigError, ensure_data_dir, load_settings
    from storage.embedded.owner import EmbeddedUnavailable
    from storage.errors import DatabaseUnavailable

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"watchkeeper: {exc}", file=sys.stderr)
        if args.command == "doctor":  # its report, with the next step, as for any part
            from agent.cli.doctor import unreadable_settings

            sys.stdout.write(unreadable_settings(exc))
        return 2
    level = logging.DEBUG if args.verbose else logging.INFO
    if args.command in ("chat", "doctor", "page-test") and not args.verbose:
        level = logging.WARNING
    setup_logging(settings, level)
    try:
        if _uses_data_dir(args.command, settings):
            ensure_data_dir(settings.data_dir)
        if args.command == "run":
            return run(_run(settings, spare))
        if args.command == "chat":
            return run(_chat(settings))
        if args.command == "doctor":
            from agent.cli.doctor import doctor

            return run(doctor(settings))
        if args.command == "schedule":
            from agent.cli.upcoming import print_schedule

            code: int = run(print_schedule(settings, args.hours))
            return code
        if args.command == "pair":
            from agent.cli.pair import pair

            code = run(
                pair(settings, args.code, list_only=args.list, remove=args.remove, new=args.new)
            )
            return code
        if args.command == "page-test":
            from agent.cli.page_test import page_test

            code = run(page_test(settings, wait=args.wait, step=args.step))
            return code
        if args.command == "whatsapp":
            from agent.cli.whatsapp_link import link

            code = run(link(settings, args.phone))
            return code
    except ConfigError as exc:
        print(f"watchkeeper: {exc}", file=sys.stderr)
        return 2
    except (AlreadyRunning, EmbeddedUnavailable, DatabaseUnavailable) as exc:
        print(f"watchkeeper: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 1
