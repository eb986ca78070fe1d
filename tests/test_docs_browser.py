"""The API docs in headless Chromium with the network cut off: /docs lists every operation.

A real `haki serve`, a real browser. Two cuts, so that a page reaching for another host cannot
succeed and cannot go unnoticed: Chromium resolves no host name but the loopback address
(`--host-resolver-rules`), and every request the page makes is paused over the DevTools protocol
(Fetch domain), continued only when it goes to the server, failed and recorded otherwise. The
test asserts that nothing was recorded, that no Content-Security-Policy violation was logged, and
that the operations Swagger UI drew are exactly those of /docs/openapi.json. A screenshot is saved
(its path is printed; HAKI_UI_SCREENSHOT_DIR keeps it somewhere known).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.helpers.chromium import BROWSER_TEST, STEP_TIMEOUT_SECONDS, Page, chromium
from tests.helpers.server import Server

pytestmark = BROWSER_TEST

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


class Cut:
    """Lets requests to the server through, fails and records every other one."""

    def __init__(self, page: Page, own_netloc: str) -> None:
        self.page = page
        self.own = own_netloc
        self.allowed: list[str] = []
        self.blocked: list[str] = []

    async def paused(self, params: dict[str, Any]) -> None:
        url = params["request"]["url"]
        if url.startswith(("data:", "blob:")) or urlsplit(url).netloc == self.own:
            self.allowed.append(url)
            await self.page.send("Fetch.continueRequest", {"requestId": params["requestId"]})
        else:
            self.blocked.append(url)
            await self.page.send(
                "Fetch.failRequest", {"requestId": params["requestId"], "errorReason": "InternetDisconnected"}
            )


async def _wait_for_operations(page: Page, expected: int) -> int:
    deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
    drawn = 0
    while time.monotonic() < deadline:
        drawn = int(await page.eval("document.querySelectorAll('.opblock').length") or 0)
        if drawn >= expected:
            return drawn
        await asyncio.sleep(0.1)
    return drawn


def _screenshot_dir(tmp_path: Path) -> Path:
    chosen = os.environ.get("HAKI_UI_SCREENSHOT_DIR")
    path = Path(chosen) if chosen else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


async def test_docs_list_every_operation_with_the_network_cut_off(server: Server, tmp_path: Path) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        spec = (await http.get(f"{server.url}/docs/openapi.json")).json()
    operations = {
        (method.upper(), path) for path, item in spec["paths"].items() for method in item if method in METHODS
    }
    assert len(operations) >= 11
    own = urlsplit(server.url).netloc
    args = [f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {urlsplit(server.url).hostname}"]
    async with chromium(tmp_path / "profile", args) as page:
        cut = Cut(page, own)
        page.on("Fetch.requestPaused", cut.paused)
        console: list[str] = []
        page.on("Log.entryAdded", lambda p: console.append(f"{p['entry']['level']}: {p['entry']['text']}"))
        page.on(
            "Runtime.consoleAPICalled",
            lambda p: console.append(f"{p['type']}: {[a.get('value') for a in p.get('args', [])]}"),
        )
        await page.send("Log.enable")
        await page.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})

        seen: dict[str, Any] = {}
        for path in ("/docs", "/docs/swagger"):
            await page.goto(f"{server.url}{path}", path)
            drawn = await _wait_for_operations(page, len(operations))
            dom = await page.eval(
                """({
                title: document.title,
                ops: [...document.querySelectorAll('.opblock')].map(b => [
                    b.querySelector('.opblock-summary-method').textContent.trim(),
                    b.querySelector('.opblock-summary-path').getAttribute('data-path')]),
                errors: [...document.querySelectorAll('.errors-wrapper, .loading-container .error')]
                    .map(e => e.textContent),
                authorize: !!document.querySelector('.auth-wrapper .authorize'),
                scripts: [...document.scripts].map(s => s.src),
            })"""
            )
            seen[path] = (drawn, dom)
            if path == "/docs":
                shot = await page.send(
                    "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False}
                )

    png = _screenshot_dir(tmp_path) / "api-docs-offline.png"
    png.write_bytes(base64.b64decode(shot["data"]))
    print(f"\nscreenshot: {png}")

    assert not cut.blocked, f"the docs asked for other hosts: {cut.blocked}"
    assert any(u.endswith("/docs/assets/swagger-ui-bundle.js") for u in cut.allowed), cut.allowed
    assert any(u.endswith("/docs/openapi.json") for u in cut.allowed), cut.allowed
    violations = [line for line in console if "Content Security Policy" in line or "Refused to" in line]
    assert not violations, violations
    for path, (drawn, dom) in seen.items():
        # An operation with two tags is drawn under each: compare the sets.
        assert drawn >= len(operations), (path, drawn, dom["errors"])
        assert {(m, p) for m, p in dom["ops"]} == operations, path
        assert not dom["errors"], (path, dom["errors"])
        assert dom["authorize"], f"{path}: the Bearer scheme's Authorize button is missing"
        assert all(urlsplit(s).netloc == own for s in dom["scripts"]), dom["scripts"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
