"""A fake Twilio Messages API on 127.0.0.1.

``POST /2010-04-01/Accounts/{sid}/Messages.json`` records the form fields and
answers 201 with the real wire shape (``sid``, ``status``, ``date_created``...).
Failures are scripted with ``push(Answer(status, body))``; errors use Twilio's
envelope ``{"code", "message", "more_info", "status"}``. Basic auth is checked
against the account SID and token the fake was built with.
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.scripted_server import Answer, ScriptedServer


@dataclass
class Sent:
    """One message as Twilio received it."""

    account: str
    to: str
    sender: str
    body: str
    fields: dict[str, str]


def twilio_error(status: int, code: int, message: str) -> Answer:
    return Answer(
        status,
        {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
    )


class FakeTwilio(ScriptedServer):
    def __init__(self, account_sid: str = "AC" + "0" * 32, auth_token: str = "tok") -> None:
        super().__init__()
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.sent: list[Sent] = []
        self.attempts = 0
        self._ids = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/2010-04-01/Accounts/{sid}/Messages.json", self._messages)

    @property
    def bodies_sent(self) -> list[str]:
        return [s.body for s in self.sent]

    def _authorized(self, request: web.Request) -> bool:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        return request.headers.get("Authorization", "") == f"Basic {expected}"

    async def _messages(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if not self._authorized(request):
            return web.json_response(twilio_error(401, 20003, "Authenticate").body, status=401)
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        scripted = self.script.popleft() if self.script else None
        if scripted is not None and scripted.status >= 300:
            return web.json_response(scripted.body, status=scripted.status)
        sid = f"SM{next(self._ids):032d}"
        account = request.match_info["sid"]
        self.sent.append(
            Sent(account, form.get("To", ""), form.get("From", ""), form.get("Body", ""), form)
        )
        return web.json_response(self._message(sid, account, form), status=201)

    @staticmethod
    def _message(sid: str, account: str, form: dict[str, str]) -> dict[str, Any]:
        return {
            "sid": sid,
            "account_sid": account,
            "to": form.get("To"),
            "from": form.get("From"),
            "body": form.get("Body"),
            "status": "queued",
            "num_segments": "1",
            "direction": "outbound-api",
            "date_created": "Thu, 26 Nov 2026 09:00:00 +0000",
            "date_updated": "Thu, 26 Nov 2026 09:00:00 +0000",
            "date_sent": None,
            "price": None,
            "error_code": None,
            "error_message": None,
            "uri": f"/2010-04-01/Accounts/{account}/Messages/{sid}.json",
        }
