"""A local web site with one HTML page whose content a test changes between checks;
it counts the requests, so a test can wait for the checks that follow a change."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class PageSite:
    html: str = "<html><body><p>hello</p></body></html>"
    status: int = 200
    hits: int = 0
    url: str = ""
    by_query: Counter[str] = field(default_factory=Counter)
    """Requests per query string (``?m=price``): two monitors of one page told apart."""

    async def answer(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.by_query[request.query_string] += 1
        return web.Response(status=self.status, text=self.html, content_type="text/html")


@contextlib.asynccontextmanager
async def page_site(html: str) -> AsyncIterator[PageSite]:
    """The site serving ``html`` at ``site.url`` until the block ends."""
    site = PageSite(html)
    app = web.Application()
    app.router.add_get("/page", site.answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    site.url = f"http://127.0.0.1:{port}/page"
    try:
        yield site
    finally:
        await runner.cleanup()
