"""A real headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium.

Selenium's calls block, and the app under test serves from this test's event loop, so
every browser call runs in a worker thread (``await browser.get(...)``).

Outside CI a missing browser skips the browser tests with a message saying what to
install; in CI (``CI`` set) it is a failure: ``scripts/test`` installs the packages.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser")
CHROMEDRIVER = ("/usr/bin/chromedriver", "chromedriver")
PHONE = (390, 844)
PAGE_LOAD_SECONDS = 20
MISSING = (
    "browser tests skipped: no chromium and chromium-driver here; "
    "`CI=true scripts/test` installs them (apt-get, as root) and runs them"
)


def _which(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def start_driver() -> Any:
    """A headless Chromium, or a skip (a failure in CI) when it is not installed."""
    chromium, driver_path = _which(CHROMIUM), _which(CHROMEDRIVER)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        chromium = None
    if chromium is None or driver_path is None:
        if in_ci():
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI containers run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    chrome.set_page_load_timeout(PAGE_LOAD_SECONDS)  # a hang fails with a message
    return chrome


@dataclass
class Browser:
    """The driver, with each blocking call moved off the event loop: never call
    ``driver`` or an element directly from a test, it would deadlock on a page load."""

    driver: Any
    base_url: str = ""

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    async def get(self, path: str) -> None:
        await self.call(self.driver.get, self.base_url + path)

    async def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return await self.call(self.driver.find_element, By.CSS_SELECTOR, css)

    async def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return await self.call(self.driver.find_elements, By.CSS_SELECTOR, css)

    async def text(self, css: str = "body") -> str:
        element = await self.find(css)
        return str(await self.call(lambda: element.text))

    async def type(self, css: str, text: str) -> None:
        element = await self.find(css)
        await self.call(element.clear)
        await self.call(element.send_keys, text)

    async def click(self, css: str) -> None:
        element = await self.find(css)
        await self.call(element.click)

    async def script(self, js: str, *args: Any) -> Any:
        return await self.call(self.driver.execute_script, js, *args)

    async def attr(self, css: str, name: str) -> str | None:
        element = await self.find(css)
        value = await self.call(element.get_attribute, name)
        return None if value is None else str(value)

    async def path(self) -> str:
        """The current path; every call waits off the loop (a navigation may be pending,
        and the server that answers it runs on this loop)."""
        url = str(await self.call(lambda: self.driver.current_url))
        return url.removeprefix(self.base_url) or "/"

    async def cookies(self) -> list[dict[str, Any]]:
        return list(await self.call(self.driver.get_cookies))

    async def reset(self) -> None:
        """A fresh start for the next test: no cookies, a desktop-sized window."""
        await self.call(self.driver.delete_all_cookies)
        await self.call(self.driver.execute_cdp_cmd, "Emulation.clearDeviceMetricsOverride", {})

    async def phone(self, width: int = PHONE[0], height: int = PHONE[1]) -> None:
        """The viewport of a phone (390x844 CSS pixels, touch, mobile)."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": 3, "mobile": True}
        await self.call(self.driver.execute_cdp_cmd, "Emulation.setDeviceMetricsOverride", metrics)

    async def wait_for(self, css: str, seconds: float = 10) -> Any:
        """The first element matching ``css`` once it is there (a click's navigation may
        still be under way when ``click`` returns)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.wait import WebDriverWait

        found = expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
        return await self.call(WebDriverWait(self.driver, seconds).until, found)

    async def submit(self, css: str, then: str) -> None:
        """Press the button ``css`` and wait for the next page to show ``then``."""
        old = await self.find("html")
        await self.click(css)
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support.wait import WebDriverWait

        def gone(_: Any) -> bool:
            # Chromium may answer "node does not belong to the document" rather than
            # "stale element" for a page being replaced: both mean the old one is gone.
            try:
                old.is_enabled()
            except WebDriverException:
                return True
            return False

        await self.call(WebDriverWait(self.driver, 10).until, gone)
        await self.wait_for(then)

    async def log_in(self, token: str) -> None:
        """Log in through the form; returns on the page it leads to (or the error)."""
        await self.get("/login")
        await self.type("#token", token)
        await self.submit("form[action='/login'] button[type=submit]", "nav.nav, p.error")
