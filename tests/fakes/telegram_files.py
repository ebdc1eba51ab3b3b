"""Files on the fake Telegram Bot API: ``getFile`` and the file download route.

``getFile`` (``POST /bot<token>/getFile``, form field ``file_id``) answers a File
object ``{file_id, file_unique_id, file_size, file_path}``; an unknown id gets 400
"Bad Request: invalid file_id" and one over the Bot API's 20 MB download limit 400
"Bad Request: file is too big", as Telegram does. The bytes are served at
``GET /file/bot<token>/<file_path>``. Every call is recorded, so a test can assert
that nothing was fetched.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from aiohttp import web

BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024


@dataclass
class HostedFile:
    file_id: str
    data: bytes
    file_path: str
    announced_size: int | None
    """What ``getFile`` reports as ``file_size`` (None: the field is left out)."""


def _error(status: int, description: str) -> web.Response:
    return web.json_response(
        {"ok": False, "error_code": status, "description": description}, status=status
    )


class TelegramFiles:
    def __init__(self, token: str) -> None:
        self.token = token
        self.files: dict[str, HostedFile] = {}
        self.get_file_calls: list[str] = []
        self.downloads: list[str] = []
        self._ids = itertools.count(1)

    def add(
        self,
        data: bytes,
        *,
        folder: str = "photos",
        ext: str = "jpg",
        announced_size: int | None = -1,
        file_id: str | None = None,
    ) -> HostedFile:
        """Host ``data``; ``announced_size`` -1 reports its real length."""
        n = next(self._ids)
        fid = file_id or f"AgAC{folder[:2]}{n:04d}"
        size = len(data) if announced_size == -1 else announced_size
        hosted = HostedFile(fid, data, f"{folder}/file_{n}.{ext}", size)
        self.files[fid] = hosted
        return hosted

    @property
    def fetched(self) -> int:
        """getFile calls plus downloads: zero means nothing was asked for."""
        return len(self.get_file_calls) + len(self.downloads)

    def routes(self, app: web.Application) -> None:
        """Add before the generic ``/bot{token}/{method}`` route."""
        app.router.add_post("/bot{token}/getFile", self._get_file)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)

    async def _get_file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        form = await request.post()
        file_id = str(form.get("file_id", ""))
        self.get_file_calls.append(file_id)
        hosted = self.files.get(file_id)
        if hosted is None:
            return _error(400, "Bad Request: invalid file_id")
        if len(hosted.data) > BOT_API_DOWNLOAD_LIMIT:
            return _error(400, "Bad Request: file is too big")
        result: dict[str, Any] = {
            "file_id": hosted.file_id,
            "file_unique_id": f"u{hosted.file_id}",
            "file_path": hosted.file_path,
        }
        if hosted.announced_size is not None:
            result["file_size"] = hosted.announced_size
        return web.json_response({"ok": True, "result": result})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        path = request.match_info["path"]
        self.downloads.append(path)
        for hosted in self.files.values():
            if hosted.file_path == path:
                # Streamed in chunks without a length, so only counting can stop a reader.
                response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
                response.enable_chunked_encoding()
                await response.prepare(request)
                for start in range(0, len(hosted.data), 65536):
                    await response.write(hosted.data[start : start + 65536])
                await response.write_eof()
                return response
        return _error(404, "Not Found")
