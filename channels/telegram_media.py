"""Downloading a file a Telegram user sent: ``getFile``, then the Bot API file URL.

The file URL is ``<TELEGRAM_API_BASE_URL>/file/bot<token>/<file_path>``; the bot was
built with that base (``Bot(base_file_url=...)``), so PTB's ``File.file_path`` is the
full URL. The token is in it: failures are reported with it blanked out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from telegram import Bot
from telegram.error import BadRequest

from channels.http_fetch import fetch_capped
from channels.media_fetch import MediaTooLarge


async def fetch_file(
    bot: Bot,
    source: Mapping[str, str],
    max_bytes: int,
    slots: asyncio.Semaphore,
    safe: Callable[[BaseException], str],
) -> bytes:
    file_id = source.get("file_id")
    if not file_id:
        raise ValueError("no file_id to fetch")
    try:
        async with slots:
            file = await bot.get_file(file_id)
    except BadRequest as exc:
        if "too big" in str(exc).lower():  # over the Bot API's own download limit
            raise MediaTooLarge(safe(exc)) from None
        raise RuntimeError(safe(exc)) from None
    if file.file_size is not None and file.file_size > max_bytes:
        raise MediaTooLarge(f"getFile says {file.file_size} bytes")
    if not file.file_path:
        raise RuntimeError("getFile gave no file_path")
    try:
        return await fetch_capped(file.file_path, max_bytes)
    except MediaTooLarge:
        raise
    except Exception as exc:
        raise RuntimeError(safe(exc)) from None
