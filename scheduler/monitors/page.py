"""A web page's readable text, fetched with bounds: for ``fetch_url`` (the model's
tool) and ``change`` monitors alike, so both read a page the same way.

``get_page`` makes one GET (redirects followed, at most ``MAX_REDIRECTS``), bounded in
time for the whole exchange and in bytes read (the rest is never received); it raises
``PageError`` in our own words, never the site's. ``readable`` turns HTML into the text
a reader sees, the whole page or only the parts a ``Selector`` names
(``scheduler.monitors.select``). The parser is the standard library's, over text
bounded in size and ``tame``d first (its scans stop at the next ``>``), so hostile
markup costs linear time.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from html.parser import HTMLParser

import aiohttp

from channels.http_fetch import read_at_most
from scheduler.monitors.select import MAX_DEPTH, Element, Selector

MAX_REDIRECTS = 5
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")
SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe"})
BLOCKS = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
     "header", "footer", "table", "ul", "ol", "pre", "blockquote", "dt", "dd", "main", "nav"}
)  # fmt: skip
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
     "source", "track", "wbr"}
)  # fmt: skip
"""Elements that never have content or an end tag: never on the stack of open ones."""
SELF_CLOSING = frozenset({"p", "li", "dt", "dd", "tr", "td", "th", "option"})
"""Elements a second one of the same kind closes (``<li>a<li>b``), as browsers do."""
_SPACES = re.compile(r"[ \t\r\f\v]+")
_LINES = re.compile(r"\n\s*\n+")


class PageError(Exception):
    """Why a page could not be read, in our words (never the site's)."""


@dataclass(frozen=True)
class Page:
    url: str
    """Where the page was found, after redirects."""
    status: int
    body: str
    """The answer decoded, at most ``max_bytes`` of it."""
    whole: bool
    """False when the answer was longer than what was read."""
    html: bool


async def get_page(
    session: aiohttp.ClientSession, url: str, seconds: float, max_bytes: int, agent: str
) -> Page:
    """The text page at ``url`` (checked by the caller); ``PageError`` says why not."""
    try:
        async with asyncio.timeout(seconds):
            async with session.get(
                url, headers={"User-Agent": agent}, max_redirects=MAX_REDIRECTS
            ) as resp:
                kind = resp.content_type or ""
                if resp.status >= 400:
                    raise PageError(f"the page answered HTTP {resp.status}")
                if not kind.startswith(TEXT_TYPES):
                    raise PageError(f"not a text page ({kind or 'no content type'}); not read")
                body, whole = await read_at_most(resp, max_bytes)
                final, charset, status = str(resp.url), resp.charset, resp.status
    except TimeoutError:
        raise PageError(f"the page gave no full answer within {seconds:g} s") from None
    except aiohttp.TooManyRedirects:
        raise PageError(f"more than {MAX_REDIRECTS} redirects; not followed") from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise PageError(f"could not fetch the page ({type(exc).__name__})") from None
    try:
        decoded = body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        decoded = body.decode("utf-8", errors="replace")
    return Page(final, status, decoded, whole, "html" in kind)


class Readable(HTMLParser):
    """The text a reader sees: scripts, styles and the head left out, a line break
    at each block, the ``<title>`` kept apart. With a ``selector``, only the text
    inside the elements it matches (each match on its own line; ``found`` says
    whether any matched)."""

    def __init__(self, selector: Selector | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self.found = False
        self._selector = selector
        self._open: list[Element] = []
        self._capture = -1 if selector is not None else 0
        """The depth of the open match whose text is kept (0: the whole page; -1: none)."""
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in SKIPPED:
            self._skipping += 1
        elif tag in BLOCKS:
            self._add("\n")
        if self._selector is None or tag in VOID:
            return
        if tag in SELF_CLOSING and self._open and self._open[-1].tag == tag:
            self._close(len(self._open) - 1)
        if len(self._open) >= MAX_DEPTH:
            return  # deeper than any page needs: not tracked (its end tag finds nothing)
        element = Element.of(tag, attrs)
        self._open.append(element)
        if self._capture < 0 and self._selector.matches(self._open):
            self._capture = len(self._open)
            self.found = True
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in BLOCKS:
            self._add("\n")
        if self._selector is None:
            return
        for depth in range(len(self._open) - 1, -1, -1):  # the nearest open one
            if self._open[depth].tag == tag:
                self._close(depth)
                return

    def _close(self, depth: int) -> None:
        """Close the element at ``depth`` (0-based) and everything inside it."""
        del self._open[depth:]
        if self._capture > len(self._open):
            self._capture = -1
            self.parts.append("\n")

    def _add(self, text: str) -> None:
        if self._capture >= 0:
            self.parts.append(text)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self._add(data)

    def text(self) -> str:
        lines = (_SPACES.sub(" ", line).strip() for line in "".join(self.parts).split("\n"))
        return _LINES.sub("\n\n", "\n".join(lines)).strip()


def tame(body: str) -> str:
    """``body`` as the parser can take it in linear time: comments, declarations and
    processing instructions (``<!...>``, ``<?...>``) left out, and each ``<`` that no
    ``>`` follows before the next ``<`` written as ``&lt;`` (text, as a browser shows
    it); tags are left whole (a ``>`` quoted in one is the parser's to read). The
    standard library's parser rescans the rest of the page from every such ``<`` or
    unended ``<![``: minutes for 100 KB of ``<x <x ...``. Each ``find`` here
    starts past the last one's start, and the next ``>`` is looked up again only once
    passed, so this is linear too."""
    out: list[str] = []
    at = 0
    close = body.find(">")
    while (start := body.find("<", at)) >= 0:
        out.append(body[at:start])
        if close != -1 and close < start:
            close = body.find(">", start)
        if body.startswith("<!--", start):
            end = body.find("-->", start + 4)
            if end < 0:
                return "".join(out)  # an unended comment hides the rest, as in a browser
            at = end + 3
            continue
        following = body.find("<", start + 1)
        if close < 0 or (0 <= following < close):
            out.append("&lt;")
            at = start + 1
        elif body.startswith(("<!", "<?"), start):
            at = close + 1
        else:  # a tag, left to the parser whole (a quoted ">" in it included)
            out.append("<")
            at = start + 1
    out.append(body[at:])
    return "".join(out)


def readable(body: str, html: bool) -> tuple[str, str]:
    """The page's title and readable text (the body as it is when it is not HTML)."""
    if not html:
        return "", body.strip()
    parser = Readable()
    parser.feed(tame(body))
    parser.close()
    return " ".join(parser.title.split()), parser.text()


def selected(body: str, selector: Selector) -> str | None:
    """The readable text of the parts of the HTML ``body`` that ``selector`` matches,
    or None when it matches nothing."""
    parser = Readable(selector)
    parser.feed(tame(body))
    parser.close()
    return parser.text() if parser.found else None
