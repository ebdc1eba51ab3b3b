"""``fetch_url``: a web page's readable text, for the model, as outside text.

The same network rules as monitors (``scheduler.monitors.monitor.check_url``: an
http(s) URL with a host); bounded in time (for the whole exchange,
redirects included), in bytes read (the rest is never received) and in the text handed
on (``FetchLimits``). What the page says comes in an untrusted block, and
the call itself is owner-only and waits for the owner after outside text in its run
(``writes``): a URL can carry data out as well as bring it in.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Annotated

import aiohttp
from pydantic import BaseModel, Field, WithJsonSchema

from agent.context import RunContext
from agent.llm.untrusted import EXTERNAL, for_model
from agent.tools.base import Tool, ToolError, ToolResult
from channels.http_fetch import read_at_most
from scheduler.monitors.monitor import URL_LIMIT, MonitorError, check_url
from storage.outside import Outside

MAX_REDIRECTS = 5
USER_AGENT = "Watchkeeper-fetch/1"
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe"})
BLOCKS = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
     "header", "footer", "table", "ul", "ol", "pre", "blockquote", "dt", "dd", "main", "nav"}
)  # fmt: skip
_SPACES = re.compile(r"[ \t\r\f\v]+")
_LINES = re.compile(r"\n\s*\n+")


@dataclass(frozen=True)
class FetchLimits:
    """How much one fetch may take (tests shorten them)."""

    seconds: float = 15.0
    """The whole exchange, redirects included."""
    max_bytes: int = 2 * 1024 * 1024
    """Bytes of the answer read; the rest is never received."""
    max_chars: int = 12_000
    """Characters of the page's text handed to the model (about 3,000 tokens)."""


class FetchUrlArgs(BaseModel):
    url: Annotated[
        str,
        Field(min_length=1, max_length=URL_LIMIT),
        WithJsonSchema({"type": "string"}),
    ]


class Readable(HTMLParser):
    """The text a reader sees: scripts, styles and the head left out, a line break
    at each block, the ``<title>`` kept apart."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in SKIPPED:
            self._skipping += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (_SPACES.sub(" ", line).strip() for line in "".join(self.parts).split("\n"))
        return _LINES.sub("\n\n", "\n".join(lines)).strip()


def readable(body: str, html: bool) -> tuple[str, str]:
    """The page's title and readable text (the body as it is when it is not HTML)."""
    if not html:
        return "", body.strip()
    parser = Readable()
    parser.feed(body)
    parser.close()
    return " ".join(parser.title.split()), parser.text()


async def fetch_page(args: FetchUrlArgs, ctx: RunContext, limits: FetchLimits) -> ToolResult:
    """The page at ``args.url`` as the tool answers it; ``ToolError`` says why not."""
    try:
        url = check_url(args.url)
    except MonitorError as exc:
        raise ToolError(str(exc)) from None
    try:
        async with asyncio.timeout(limits.seconds):
            async with ctx.deps.http.get(
                url, headers={"User-Agent": USER_AGENT}, max_redirects=MAX_REDIRECTS
            ) as resp:
                kind = resp.content_type or ""
                if resp.status >= 400:
                    raise ToolError(f"the page answered HTTP {resp.status}")
                if not kind.startswith(TEXT_TYPES):
                    raise ToolError(f"not a text page ({kind or 'no content type'}); not read")
                body, whole = await read_at_most(resp, limits.max_bytes)
                final, charset = str(resp.url), resp.charset
    except TimeoutError:
        raise ToolError(f"the page gave no full answer within {limits.seconds:g} s") from None
    except aiohttp.TooManyRedirects:
        raise ToolError(f"more than {MAX_REDIRECTS} redirects; not followed") from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise ToolError(f"could not fetch the page ({type(exc).__name__})") from None
    try:
        decoded = body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        decoded = body.decode("utf-8", errors="replace")
    title, text = readable(decoded, "html" in kind)
    cut = len(text) > limits.max_chars or not whole
    text = text[: limits.max_chars]
    shown = f"{title}\n\n{text}" if title else text
    result: ToolResult = {
        "url": final,
        "status": resp.status,
        "chars": len(text),
        "page": for_model(Outside(shown, f"the page at {final}")),
    }
    if cut:
        result["note"] = f"only the first {len(text)} characters of the page's text"
    if not text:
        result["note"] = "the page has no readable text (it may need a browser to render it)"
    return result


def fetch_url_tool(limits: FetchLimits | None = None) -> Tool[FetchUrlArgs]:
    """The ``fetch_url`` tool with these limits (the defaults: ``FETCH_URL``)."""
    bounds = limits or FetchLimits()

    async def handler(args: FetchUrlArgs, ctx: RunContext) -> ToolResult:
        return await fetch_page(args, ctx, bounds)

    return Tool(
        name="fetch_url",
        description=f"An http(s) page's text, in an <{EXTERNAL}> block.",
        args=FetchUrlArgs,
        handler=handler,
        writes=True,  # owner only; waits after outside text: a URL can carry data out
        untrusted_result="a fetched web page",
    )


FETCH_URL = fetch_url_tool()
