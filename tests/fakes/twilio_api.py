"""A fake Twilio Messages and Calls API on 127.0.0.1.

``POST /2010-04-01/Accounts/{sid}/Messages.json`` records the form fields and
answers 201 with the real wire shape (``sid``, ``status``, ``date_created``...).
Failures are scripted with ``push(Answer(status, body))``; errors use Twilio's
envelope ``{"code", "message", "more_info", "status"}``. Basic auth is checked
against the account SID and token the fake was built with.

MMS media: ``add_media`` hosts a file under the URL Twilio puts in ``MediaUrl0``
(``/2010-04-01/Accounts/{sid}/Messages/{MM}/Media/{ME}``). Like Twilio with HTTP auth
enforced on media, a GET without the account's basic auth gets 401; with it, a 307
redirect to a CDN URL (here ``/cdn/{ME}`` on the same fake, or ``cdn_base`` when a
test sets another host) that serves the bytes with their ``Content-Type``.

Calls: ``POST /2010-04-01/Accounts/{sid}/Calls.json`` records ``To``, ``From``, the
inline ``Twiml`` and ``StatusCallback`` (``calls``) and answers 201 with a call
resource (``sid`` ``CA...``, ``status`` ``queued``); its failures are scripted apart
from the messages' with ``push_call(Answer(...))``.

The account: ``GET /2010-04-01/Accounts/{sid}.json`` answers the account resource
(``status`` from ``account_status``) to the account's basic auth, 401 (code 20003)
otherwise; ``GET .../IncomingPhoneNumbers.json?PhoneNumber=`` lists those of
``numbers`` that match, as Twilio's list resource ``incoming_phone_numbers``.

With ``segment_pacing`` on, a sending number sends one segment a second, as a long code
does: a message arriving before the segments of the number's last accepted message have
had their seconds (counted from its arrival, ``time.perf_counter()``) is refused with
429 and Twilio's error 20429, and recorded in ``refusals``. Segments are counted as
carriers count them (GSM-7: 160 alone, 153 per part; else UCS-2: 70, or 67).
"""

from __future__ import annotations

import base64
import itertools
import math
import time
from collections import deque
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
    at: float = 0.0
    """``time.perf_counter()`` when the request arrived."""
    segments: int = 1


@dataclass
class Call:
    """One call as Twilio received it: who it rings and the TwiML it plays."""

    sid: str
    to: str
    sender: str
    twiml: str
    status_callback: str
    fields: dict[str, str]


GSM_7 = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
GSM_7_ESCAPED = frozenset("\f^{}\\[~]|€")


def segments_of(body: str) -> int:
    """Billed segments of ``body``, as the carrier counts them."""
    if all(ch in GSM_7 or ch in GSM_7_ESCAPED for ch in body):
        septets = len(body) + sum(ch in GSM_7_ESCAPED for ch in body)
        return 1 if septets <= 160 else math.ceil(septets / 153)
    units = len(body.encode("utf-16-le")) // 2
    return 1 if units <= 70 else math.ceil(units / 67)


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
        self.calls: list[Call] = []
        self.call_attempts = 0
        self.call_script: deque[Answer] = deque()
        self.attempts = 0
        self._ids = itertools.count(1)
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_requests: list[tuple[str, bool]] = []
        """(path, whether it carried the account's basic auth), media and CDN alike."""
        self.cdn_base: str | None = None
        self.account_status = "active"
        self.numbers: set[str] = {"+15550001111"}
        """The account's own phone numbers (``IncomingPhoneNumbers``)."""
        self.segment_pacing = False
        """One segment a second per sending number; faster gets 429 (error 20429)."""
        self.refusals: list[tuple[str, float]] = []
        """(From, arrival) of each message refused for going too fast."""
        self._free_at: dict[str, float] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/2010-04-01/Accounts/{sid}/Messages.json", self._messages)
        app.router.add_post("/2010-04-01/Accounts/{sid}/Calls.json", self._calls)
        media = "/2010-04-01/Accounts/{sid}/Messages/{msid}/Media/{media_sid}"
        app.router.add_get(media, self._media)
        app.router.add_get("/cdn/{media_sid}", self._cdn)
        app.router.add_get("/2010-04-01/Accounts/{sid}.json", self._account)
        numbers = "/2010-04-01/Accounts/{sid}/IncomingPhoneNumbers.json"
        app.router.add_get(numbers, self._numbers)

    def _refused(self) -> web.Response:
        return web.json_response(twilio_error(401, 20003, "Authenticate").body, status=401)

    async def _account(self, request: web.Request) -> web.Response:
        if not self._authorized(request) or request.match_info["sid"] != self.account_sid:
            return self._refused()
        sid = self.account_sid
        return web.json_response(
            {"sid": sid, "friendly_name": "My first account", "status": self.account_status,
             "type": "Full", "uri": f"/2010-04-01/Accounts/{sid}.json"}
        )  # fmt: skip

    async def _numbers(self, request: web.Request) -> web.Response:
        if not self._authorized(request) or request.match_info["sid"] != self.account_sid:
            return self._refused()
        wanted = request.query.get("PhoneNumber")
        owned = sorted(n for n in self.numbers if wanted in (None, n))
        rows = [{"sid": f"PN{i:032d}", "phone_number": n} for i, n in enumerate(owned)]
        return web.json_response({"incoming_phone_numbers": rows, "page": 0, "page_size": 50})

    def add_media(self, data: bytes, content_type: str, message_sid: str = "MM1") -> str:
        """Host ``data``; returns its ``MediaUrl``."""
        media_sid = f"ME{next(self._ids):032d}"
        self.media[media_sid] = (data, content_type)
        account = f"{self.url}/2010-04-01/Accounts/{self.account_sid}"
        return f"{account}/Messages/{message_sid}/Media/{media_sid}"

    async def _media(self, request: web.Request) -> web.Response:
        self.media_requests.append((request.path, self._authorized(request)))
        if not self._authorized(request):
            return web.json_response(twilio_error(401, 20003, "Authenticate").body, status=401)
        media_sid = request.match_info["media_sid"]
        if media_sid not in self.media:
            return web.json_response(twilio_error(404, 20404, "Not found").body, status=404)
        cdn = (self.cdn_base or self.url).rstrip("/")
        raise web.HTTPTemporaryRedirect(f"{cdn}/cdn/{media_sid}")

    async def _cdn(self, request: web.Request) -> web.Response:
        self.media_requests.append((request.path, self._authorized(request)))
        found = self.media.get(request.match_info["media_sid"])
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[0], content_type=found[1])

    def push_call(self, answer: Answer, times: int = 1) -> None:
        """The next calls' answers (an error status fails them), before any succeeds."""
        self.call_script.extend([answer] * times)

    async def _calls(self, request: web.Request) -> web.Response:
        self.call_attempts += 1
        if not self._authorized(request):
            return web.json_response(twilio_error(401, 20003, "Authenticate").body, status=401)
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        scripted = self.call_script.popleft() if self.call_script else None
        if scripted is not None and scripted.status >= 300:
            return web.json_response(scripted.body, status=scripted.status)
        if not form.get("To") or not (form.get("Twiml") or form.get("Url")):
            error = twilio_error(400, 21205, "Url or Twiml is required").body
            return web.json_response(error, status=400)
        sid = f"CA{next(self._ids):032d}"
        account = request.match_info["sid"]
        call = Call(
            sid,
            form.get("To", ""),
            form.get("From", ""),
            form.get("Twiml", ""),
            form.get("StatusCallback", ""),
            form,
        )
        self.calls.append(call)
        return web.json_response(
            {
                "sid": sid,
                "account_sid": account,
                "to": call.to,
                "from": call.sender,
                "status": "queued",
                "direction": "outbound-api",
                "date_created": "Thu, 26 Nov 2026 09:00:00 +0000",
                "uri": f"/2010-04-01/Accounts/{account}/Calls/{sid}.json",
            },
            status=201,
        )

    @property
    def bodies_sent(self) -> list[str]:
        return [s.body for s in self.sent]

    def _authorized(self, request: web.Request) -> bool:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        return request.headers.get("Authorization", "") == f"Basic {expected}"

    async def _messages(self, request: web.Request) -> web.Response:
        arrived = time.perf_counter()
        self.attempts += 1
        if not self._authorized(request):
            return web.json_response(twilio_error(401, 20003, "Authenticate").body, status=401)
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        scripted = self.script.popleft() if self.script else None
        if scripted is not None and scripted.status >= 300:
            return web.json_response(scripted.body, status=scripted.status)
        sender, body = form.get("From", ""), form.get("Body", "")
        segments = segments_of(body)
        if self.segment_pacing:
            if arrived < self._free_at.get(sender, 0.0):
                self.refusals.append((sender, arrived))
                error = twilio_error(429, 20429, "Too Many Requests").body
                return web.json_response(error, status=429)
            self._free_at[sender] = arrived + segments
        sid = f"SM{next(self._ids):032d}"
        account = request.match_info["sid"]
        self.sent.append(Sent(account, form.get("To", ""), sender, body, form, arrived, segments))
        answer = self._message(sid, account, form)
        answer["num_segments"] = str(segments)
        return web.json_response(answer, status=201)

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
