"""Headless Chromium for the console's browser test: Debian's `chromium` driven by Selenium
through Debian's `chromedriver` (infra/setup.sh installs both).

`headless_chromium()` opens one at a fixed window size with the browser's console log and
its network log (Chrome's performance log) kept; `requests_made`, `browser_errors` and
`foreign_markup` read what a page did; `canary_server()` is another origin that counts
every request a page makes to it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.console_views import ALLOWED_ATTRIBUTES, ALLOWED_TAGS

WINDOW = (1200, 800)
CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium_missing() -> str | None:
    """Why no browser can run here (None: Chromium, its driver and Selenium are there)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pyproject's dev extra; bash infra/setup.sh)"
    if not any(Path(p).exists() for p in CHROMIUM) and not shutil.which("chromium"):
        return "Debian's chromium is not installed (bash infra/setup.sh)"
    if not Path(CHROMEDRIVER).exists() and not shutil.which("chromedriver"):
        return "Debian's chromium-driver is not installed (bash infra/setup.sh)"
    return None


@contextlib.contextmanager
def headless_chromium(window: tuple[int, int] = WINDOW) -> Iterator[Any]:
    """A headless Chromium at `window` (CSS pixels, scale 1), its console and network logs
    kept, an alert left open for the test to see (never dismissed by the driver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    binary = next((p for p in CHROMIUM if Path(p).exists()), shutil.which("chromium"))
    options.binary_location = str(binary)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container: Chromium's own sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={window[0]},{window[1]}",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",  # only the pages' own requests in the log
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(arg)
    options.unhandled_prompt_behavior = "ignore"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(
        options=options, service=Service(shutil.which("chromedriver") or CHROMEDRIVER)
    )
    try:
        driver.set_page_load_timeout(60)
        # the viewport, not the window, is the screenshots' size
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        driver.set_window_size(2 * window[0] - inner[0], 2 * window[1] - inner[1])
        yield driver
    finally:
        driver.quit()


def requests_made(driver: Any) -> list[str]:
    """The URLs of the requests the browser sent since the last call (its network log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def browser_errors(driver: Any) -> list[str]:
    """The browser console's messages since the last call that are errors or CSP reports."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" or "Content Security Policy" in entry["message"]
    ]


def alert_open(driver: Any) -> str | None:
    """The text of an open alert, confirm or prompt (None: none is open)."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return str(driver.switch_to.alert.text)
    except NoAlertPresentException:
        return None


FOREIGN_MARKUP = """
const [tags, attributes, webUi] = arguments;
const found = [];
const text = document.contentType === "text/plain";
for (const el of document.querySelectorAll("*")) {
  const tag = el.tagName.toLowerCase();
  if (text) {  // Chromium's own wrapping of a text/plain body
    if (!["html", "head", "meta", "body", "pre"].includes(tag)) found.push("<" + tag + ">");
    continue;
  }
  if (!tags.includes(tag)) found.push("<" + tag + ">");
  for (const a of el.attributes) {
    if (!attributes.includes(a.name)) found.push("<" + tag + " " + a.name + ">");
    if (["href", "src", "action"].includes(a.name)) {
      const v = a.value;
      const own = v.startsWith("/") && !v.startsWith("//");
      if (!own && !v.startsWith(webUi + "/namespaces/")) found.push(tag + " " + a.name + "=" + v);
    }
  }
  if (tag === "script" && el.getAttribute("src") !== "/static/console.js") found.push("script");
}
return found;
"""


def foreign_markup(driver: Any, web_ui: str) -> list[str]:
    """The elements, attributes and links of the page's live DOM that are not the console's
    own (tests/support/console_views.py's lists): what a payload that became markup makes."""
    found = driver.execute_script(
        FOREIGN_MARKUP, sorted(ALLOWED_TAGS), sorted(ALLOWED_ATTRIBUTES), web_ui.rstrip("/")
    )
    return list(found)


@dataclass
class Canary:
    """Another origin: its base URL and every path requested from it."""

    url: str
    hits: list[str] = field(default_factory=list)
    pages: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def canary_server() -> Iterator[Canary]:
    """An HTTP server on another loopback port that records each request (and serves
    `pages`, HTML without any CSP, else an empty 200)."""
    canary = Canary(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            canary.hits.append(self.path)
            body = canary.pages.get(self.path, "").encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    canary.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="canary")
    thread.start()
    try:
        yield canary
    finally:
        server.shutdown()
        server.server_close()
