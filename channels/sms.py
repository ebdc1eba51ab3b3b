"""SMS through Twilio (or a Twilio-compatible provider): outbound messages and the webhook.

Outbound goes through the twilio SDK's async client. Inbound arrives on
``POST /webhooks/twilio/sms``; the signature is checked against ``PUBLIC_BASE_URL``
(never the request's Host header, which the sender chooses; without the setting every
webhook is refused) before anything is stored, then the message is handed to the
pipeline under its ``MessageSid``, so a redelivered webhook is processed once. What
the agent does with it is not decided here. STOP/START/HELP are passed on like any
text: Twilio and the carriers answer them, and the dispatcher makes sure nobody else
does.

Sends are paced to Twilio's limits on a long-code number (``channels.pacing``): one
segment a second, so a message of three segments keeps the number busy for three
seconds, and one call a second. Messages wait in the order they came.

Phone calls ride the same transport: an outbound message whose meta carries
``VOICE_CALL`` rings its ``chat_id`` through the Calls API with the message's text as
inline TwiML. What a call's key press or status callback means is decided by the
caller of ``voice_webhook``; the webhook's signature is checked here, exactly as for SMS.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web
from twilio.base.exceptions import TwilioException
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.request_validator import RequestValidator, get_signature_algorithm
from twilio.rest import Client
from yarl import URL

from channels.delivery.text import clean_inbound
from channels.http_fetch import Hop, fetch_capped, origin
from channels.pacing import Lane, Pace, PacingClosed
from channels.registry import ChannelName
from channels.types import (
    SMS_BUDGET_TAKEN,
    SMS_STATUS_CALLBACK,
    VOICE_CALL,
    InboundMessage,
    InboundSink,
    MediaItem,
    MediaRefused,
    OutboundMessage,
    SendError,
    SendResult,
    VoiceAnswer,
)
from channels.webhook_body import (
    READ_TIMEOUT,
    BodyRefused,
    Throttled,
    check_form_type,
    parse_form,
    read_body,
)
from runtime.clock import Clock, utcnow

log = logging.getLogger(__name__)

CHANNEL = ChannelName.SMS
WEBHOOK_PATH = "/webhooks/twilio/sms"
SIGNATURE_HEADER = "X-Twilio-Signature"
SIGNATURE_SETTINGS_HEADER = "X-Twilio-Webhooks-Signature-Settings"
MAX_BODY = 1600
"""Twilio refuses a longer body; we cut it ourselves so the owner sees that it was cut
(the SMS entry's ``Delivery.whole_text``, ``agent.app.registry``, says the same)."""
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response/>'
MAX_WEBHOOK_BYTES = 64 * 1024
"""Twilio's form for one message is a few KB (1,600 characters of body, ten media URLs)."""
MAX_ID_LENGTH = 64
"""Longest ``MessageSid``, ``From`` or ``To`` taken (a SID is 34 characters)."""
MAX_MEDIA = 100
"""Twilio sends at most ten attachments; a larger ``NumMedia`` is not a message."""
MMS_ATTACHMENTS = 10
"""``MediaUrl0`` to ``MediaUrl9``: the most Twilio sends."""
DEFAULT_API = "https://api.twilio.com"
_MEDIA_COUNT = re.compile(r"[0-9]{1,3}")
SEND_TIMEOUT = 20.0
SEGMENT_SECONDS = 1.0
"""A long-code number sends one segment a second (Twilio's default for 10DLC and
toll-free numbers is at least that; a short code sends more, and may pass less)."""
CALL_SECONDS = 1.0
"""Calls placed a second apart (Twilio's default of one call per second)."""
# Twilio error codes where the number itself refuses: no retry can help.
_PERMANENT_CODES = frozenset({21211, 21408, 21610, 21612, 21614})

_GSM_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM_EXTENDED = frozenset("\f^{}\\[~]|€")


@dataclass(frozen=True)
class Segments:
    """How a body travels: its encoding and how many billed segments it takes."""

    encoding: str
    units: int
    count: int


def count_segments(text: str) -> Segments:
    """GSM-7 (160, or 153 per part) when every character fits, else UCS-2 (70, or 67)."""
    if all(ch in _GSM_BASIC or ch in _GSM_EXTENDED for ch in text):
        septets = len(text) + sum(ch in _GSM_EXTENDED for ch in text)
        count = 1 if septets <= 160 else math.ceil(septets / 153)
        return Segments("GSM-7", septets, count)
    units = len(text.encode("utf-16-le")) // 2
    count = 1 if units <= 70 else math.ceil(units / 67)
    return Segments("UCS-2", units, count)


def fit_body(text: str, limit: int = MAX_BODY) -> tuple[str, bool]:
    """Cut ``text`` to ``limit`` characters with a visible note saying how much was dropped."""
    if len(text) <= limit:
        return text, False
    keep = limit
    while True:  # the note's length depends on the count it reports; settles in 2-3 steps
        note = f"\n[cut: {len(text) - keep} more characters]"
        if limit - len(note) == keep:
            return text[:keep] + note, True
        keep = limit - len(note)


def _with_base(url: str, base: str) -> str:
    """``url`` with the scheme and host (and any path prefix) of ``base``."""
    target, parts = urlsplit(base), urlsplit(url)
    path = target.path.rstrip("/") + parts.path
    return urlunsplit((target.scheme, target.netloc, path, parts.query, parts.fragment))


class _DebugOnly(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The SDK logs every request at INFO; one line per SMS is ours to write, not its."""

    def info(self, msg: object, *args: Any, **kwargs: Any) -> None:
        self.debug(msg, *args, **kwargs)


class _HttpClient(AsyncTwilioHttpClient):  # type: ignore[misc]
    """Twilio's async HTTP client with a timeout and an optional other API host.

    The SDK has no base-URL setting; rewriting each request's scheme and host here
    points the whole client at a Twilio-compatible provider (or a test fake).
    """

    def __init__(self, base_url: str | None, timeout: float) -> None:
        super().__init__(
            pool_connections=False, logger=_DebugOnly(logging.getLogger(f"{__name__}.http"), {})
        )
        self._base = base_url.rstrip("/") if base_url else None
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout))

    async def request(self, method: str, url: str, **kwargs: Any) -> Any:
        if self._base is not None:
            url = _with_base(url, self._base)
        auth = kwargs.pop("auth", None)
        if auth is not None:  # as a header: aiohttp 3.14 deprecates its BasicAuth argument
            headers = dict(kwargs.get("headers") or {})
            headers["Authorization"] = aiohttp.encode_basic_auth(auth[0], auth[1])
            kwargs["headers"] = headers
        return await super().request(method, url, **kwargs)


def _send_error(exc: BaseException) -> SendError:
    """Map an SDK or network failure; only rate limits, 5xx and the network are retried."""
    if isinstance(exc, TwilioException):
        status = int(getattr(exc, "status", 0) or 0)
        code = getattr(exc, "code", None)
        detail = getattr(exc, "msg", None) or getattr(exc, "detail", None) or ""
        text = f"twilio answered {status} (error {code}): {detail}".strip()
        if code == 21610:
            text += " (the recipient replied STOP; START re-enables messages)"
        retryable = (status == 429 or status >= 500) and code not in _PERMANENT_CODES
        return SendError(text, retryable=retryable)
    if isinstance(exc, (aiohttp.ClientError, TimeoutError, OSError)):
        return SendError(f"network error talking to twilio: {type(exc).__name__}", retryable=True)
    return SendError(f"unexpected {type(exc).__name__} sending sms", retryable=True)


class SmsChannel:
    """The SMS transport; the auth token stays in this object and never reaches a log."""

    name: str = CHANNEL

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        from_number: str,
        *,
        api_base_url: str | None = None,
        public_base_url: str | None = None,
        timeout: float = SEND_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        clock: Clock = utcnow,
        budget: Callable[[], Awaitable[bool]] | None = None,
        segment_seconds: float = SEGMENT_SECONDS,
        call_seconds: float = CALL_SECONDS,
    ) -> None:
        self._budget = budget
        self._pace = Pace()
        self._segment_seconds = segment_seconds
        self._call_seconds = call_seconds
        """Reserves one SMS in the shared hourly budget; False when it is used up."""
        self._sid = account_sid
        self._token = auth_token
        self._from = from_number
        self._base = api_base_url
        self._public = public_base_url.rstrip("/") if public_base_url else None
        self._timeout = timeout
        self._read_timeout = read_timeout
        """Seconds a webhook's whole body may take to arrive."""
        self._clock = clock
        self._refusals = Throttled(log)
        self._validator = RequestValidator(auth_token)
        self._sink: InboundSink | None = None
        self._http: _HttpClient | None = None
        self._client: Any = None
        self._counts = {
            "sent": 0,
            "failed": 0,
            "received": 0,
            "refused": 0,
            "over_budget": 0,
            "calls": 0,
        }
        self._last_error: str | None = None
        """Why the last SMS or call Twilio was asked for failed; None once one goes."""

    async def start(self, sink: InboundSink) -> None:
        """Build the HTTP client inside the running loop (aiohttp sessions bind to it)."""
        self._sink = sink
        self._pace.open()
        self._http = _HttpClient(self._base, self._timeout)
        self._client = Client(self._sid, self._token, account_sid=self._sid, http_client=self._http)

    async def stop(self) -> None:
        """Close the client; sends still waiting their turn fail as retryable."""
        self._sink = None
        self._pace.close()
        if self._http is not None:
            await self._http.close()
            self._http = None
            self._client = None

    async def typing(self, chat_id: str) -> None:
        return None  # SMS has no typing indicator

    def status(self) -> dict[str, Any]:
        host = urlsplit(self._base).netloc if self._base else "api.twilio.com"
        return {
            "connected": self._client is not None,
            "api": host,
            **self._counts,
            "last_error": self._last_error,
        }

    async def _budget_ok(self) -> bool:
        return self._budget is None or await self._budget()

    async def send(self, message: OutboundMessage) -> SendResult:
        if self._client is None:
            raise SendError("sms channel is not running", retryable=True)
        call = message.meta.get(VOICE_CALL)
        if isinstance(call, Mapping):
            return await self._call(message, call)
        reserved = self._budget is None or bool(message.meta.get(SMS_BUDGET_TAKEN))
        if not reserved and not await self._budget_ok():
            self._counts["over_budget"] += 1
            raise SendError("the hourly SMS budget is used up", retryable=False)
        body, cut = fit_body(message.text)
        segments = count_segments(body)
        report = message.meta.get(SMS_STATUS_CALLBACK)
        options = {"status_callback": report} if isinstance(report, str) and report else {}
        try:
            async with self._pace.lane(self._from) as lane:
                sent = await self._paced(
                    lane,
                    segments.count * self._segment_seconds,
                    lambda: self._client.messages.create_async(
                        to=message.chat_id, from_=self._from, body=body, **options
                    ),
                )
        except PacingClosed:
            raise SendError("sms channel stopped before its turn", retryable=True) from None
        except (TwilioException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._counts["failed"] += 1
            error = _send_error(exc)
            self._last_error = str(error)
            log.warning("sms to %s failed: %s", _mask(message.chat_id), error)
            raise error from None
        self._counts["sent"] += 1
        self._last_error = None
        info = {
            "segments": segments.count,
            "encoding": segments.encoding,
            "truncated": cut,
            "twilio_status": getattr(sent, "status", None),
        }
        return SendResult(external_ids=(str(sent.sid),), info=info)

    async def _call(self, message: OutboundMessage, call: Mapping[str, Any]) -> SendResult:
        """Ring ``message.chat_id`` with ``message.text`` as TwiML (outside the SMS budget:
        calls have their own cap, kept by whoever places them)."""
        ring_until = call.get("ring_until")
        if ring_until and self._clock() > datetime.fromisoformat(str(ring_until)):
            raise SendError(f"call not placed: too late (due by {ring_until})", retryable=False)
        options: dict[str, Any] = {}
        if call.get("status_callback"):
            options = {
                "status_callback": str(call["status_callback"]),
                "status_callback_method": "POST",
            }
        try:
            async with self._pace.lane(f"call:{self._from}") as lane:
                placed = await self._paced(
                    lane,
                    self._call_seconds,
                    lambda: self._client.calls.create_async(
                        to=message.chat_id, from_=self._from, twiml=message.text, **options
                    ),
                )
        except PacingClosed:
            raise SendError("sms channel stopped before its turn", retryable=True) from None
        except (TwilioException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._counts["failed"] += 1
            error = _send_error(exc)
            self._last_error = str(error)
            log.warning("call to %s failed: %s", _mask(message.chat_id), error)
            raise error from None
        self._counts["calls"] += 1
        self._last_error = None
        info = {"twilio_status": getattr(placed, "status", None)}
        return SendResult(external_ids=(str(placed.sid),), info=info)

    async def _paced(self, lane: Lane, busy: float, request: Callable[[], Awaitable[Any]]) -> Any:
        """``request()`` once ``lane`` (held) gives it a turn; the number is then busy for
        ``busy`` seconds, unless Twilio refused it (an error answer: nothing was sent)."""
        if not lane.take_turn():
            await lane.turn()
        try:
            answer = await request()
        except TwilioException:
            lane.done(0.0, counted=False)
            raise
        except BaseException:
            lane.done(busy)  # a timeout: it may have gone
            raise
        lane.done(busy)
        return answer

    async def fetch_media(self, source: Mapping[str, str], max_bytes: int) -> bytes:
        """An MMS attachment, with the account's credentials; only from the API's own
        origin (anything else could make us fetch an internal address)."""
        api = (self._base or DEFAULT_API).rstrip("/")
        url = source.get("url", "")
        if origin(URL(url)) != origin(URL(api)):
            raise MediaRefused("its address is not on the Twilio API host")
        return await fetch_capped(
            url, max_bytes, authorization=aiohttp.encode_basic_auth(self._sid, self._token),
            auth_origin=api, may_follow=_may_follow(api),
        )  # fmt: skip

    async def handle_webhook(self, request: web.Request) -> web.Response:
        """``POST /webhooks/twilio/sms``: 403 unless signed; stored before we answer 200.

        What the headers can tell is checked before the body is read (the signature's
        presence, the content type, the length); the body is read bounded in size and
        time; any malformed request gets a 4xx and nothing is stored."""
        if self._sink is None:
            return web.Response(status=503, text="sms channel not started")
        form = await self._signed_form(request)
        if isinstance(form, web.Response):
            return form
        try:
            message = self._inbound(form)
        except ValueError as exc:
            self._counts["refused"] += 1
            return web.Response(status=400, text=str(exc))
        try:
            fresh = await self._sink(message)
        except Exception:
            log.exception("storing sms %s failed", message.external_id)
            return web.Response(status=500, text="not stored; please retry")
        if fresh:
            self._counts["received"] += 1
        return web.Response(text=EMPTY_TWIML, content_type="application/xml")

    def voice_webhook(
        self, answer: VoiceAnswer
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """The handler of a call's webhooks (key presses, status callbacks): checked like
        an inbound SMS (403, nothing handed on, unless signed), then answered with the
        TwiML ``answer`` returns for the request's query and form."""

        async def handle(request: web.Request) -> web.Response:
            if self._client is None:
                return web.Response(status=503, text="sms channel not started")
            form = await self._signed_form(request)
            if isinstance(form, web.Response):
                return form
            try:
                twiml = await answer(dict(request.query), form)
            except Exception:
                log.exception("voice webhook %s failed", request.path)
                return web.Response(status=500, text="not handled; please retry")
            return web.Response(text=twiml, content_type="application/xml")

        return handle

    async def _signed_form(self, request: web.Request) -> dict[str, str] | web.Response:
        """A webhook's form once its Twilio signature checks out; else the 4xx to answer.

        What the headers can tell is checked before the body is read (the signature's
        presence, the content type, the length); the body is read bounded in size and
        time."""
        if self._public is None:
            return self._refuse(
                "twilio webhook refused: PUBLIC_BASE_URL is not set; set PUBLIC_BASE_URL "
                "to the public URL Twilio calls (the webhook URL configured at Twilio, "
                "without /webhooks/twilio/sms), so its signature can be checked"
            )
        signature = request.headers.get(SIGNATURE_HEADER, "")
        if not signature:
            return self._refuse("twilio webhook without a signature refused")
        try:
            check_form_type(request)
            form = parse_form(
                await read_body(request, limit=MAX_WEBHOOK_BYTES, within=self._read_timeout)
            )
        except BodyRefused as exc:
            self._counts["refused"] += 1
            return exc.response()
        algorithm = get_signature_algorithm(request.headers.get(SIGNATURE_SETTINGS_HEADER))
        # Twilio signs the URL exactly as configured, encoding included (``%2F``, ``+``,
        # ``%C3%A3``): PUBLIC_BASE_URL plus the raw path and query as they arrived. The
        # Host header is the sender's to choose, so it never takes part.
        url = self._public + _raw_target(request.raw_path)
        if not self._validator.validate(url, form, signature, algorithm):
            return self._refuse("twilio webhook with a bad signature refused (%s)", url)
        return {k: v for k, v in form.items() if isinstance(v, str)}

    def _refuse(self, msg: str, *args: object) -> web.Response:
        self._counts["refused"] += 1
        self._refusals.warning(msg, *args)
        return web.Response(status=403, text="forbidden")

    def _inbound(self, fields: dict[str, str]) -> InboundMessage:
        """The message a signed webhook carries; ``ValueError`` naming an absurd field."""
        sid = fields.get("MessageSid") or fields.get("SmsSid")
        sender = fields.get("From")
        if not sid or not sender:
            raise ValueError("MessageSid and From are required")
        for name, value in (("MessageSid", sid), ("From", sender), ("To", fields.get("To", ""))):
            if len(value) > MAX_ID_LENGTH:
                raise ValueError(f"{name} is over {MAX_ID_LENGTH} characters")
        count = fields.get("NumMedia") or "0"
        if not _MEDIA_COUNT.fullmatch(count) or int(count) > MAX_MEDIA:
            raise ValueError(f"NumMedia must be a whole number from 0 to {MAX_MEDIA}")
        media = int(count)
        items = tuple(
            MediaItem("image", mime, {"url": url})
            for i in range(min(media, MMS_ATTACHMENTS))
            if (url := fields.get(f"MediaUrl{i}", ""))
            and (mime := fields.get(f"MediaContentType{i}", "")).startswith("image/")
        )
        text = fields.get("Body", "")
        if media:
            text = f"[MMS with {media} attachment{'s' if media > 1 else ''}] {text}".strip()
        message = InboundMessage(
            channel=CHANNEL,
            external_id=sid,
            chat_id=sender,
            sender_id=sender,
            text=text,
            received_at=self._clock(),
            meta={"to": fields.get("To", ""), "num_media": media},
            media=items,
        )
        return clean_inbound(message)


def _may_follow(api: str) -> Hop:
    """Twilio answers a media URL with a redirect to its CDN: follow one to HTTPS, or
    within the API's own origin (a Twilio-compatible provider, a test fake)."""
    return lambda _here, there: there.scheme == "https" or origin(there) == origin(URL(api))


def _raw_target(target: str) -> str:
    """The path and query of a request target as sent, undecoded; an absolute-form
    target (``http://host/path?q``, as some proxies send) is cut to its path and query."""
    if target.startswith("/"):
        return target
    parts = urlsplit(target)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _mask(number: str) -> str:
    """Enough of a phone number to tell which one it was, not enough to leak it in logs."""
    return number[:3] + "…" + number[-2:] if len(number) > 6 else "…"
