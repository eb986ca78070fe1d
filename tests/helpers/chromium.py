"""Headless Chromium driven over the DevTools protocol, for the browser tests
(tests/test_ui_browser.py, tests/test_docs_browser.py); import it as `tests.helpers.chromium`.

`chromium(profile)` starts a headless browser with its own profile and yields a `Page`; events of
the protocol (a paused request, a console message) reach the handlers registered with `Page.on`.
A browser test module sets `pytestmark = BROWSER_TEST` (skipped when `CHROMIUM` is None).

`ui_login(client, key)` opens a /ui session for an HTTP test client (no browser): its cookie and
the CSRF token its forms carry.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import needs_program

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
BROWSER_TEST = needs_program(
    CHROMIUM, "Chromium", "`apt-get install -y chromium` (Debian)", "this browser test"
)
STEP_TIMEOUT_SECONDS = 20.0


# --- a tiny DevTools protocol client --------------------------------------------------------


class CDP:
    """Commands and events over the browser's websocket, with flattened page sessions."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        # Event name -> handlers called with (params, sessionId); a coroutine runs as a task, so
        # a handler may send commands (the reader must keep reading their answers).
        self.handlers: dict[str, list[Callable[[dict[str, Any], str | None], Any]]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            if "id" not in message and "method" in message:
                for handler in self.handlers.get(message["method"], []):
                    result = handler(message.get("params", {}), message.get("sessionId"))
                    if asyncio.iscoroutine(result):
                        task = asyncio.create_task(result)
                        self.tasks.add(task)
                        task.add_done_callback(self.tasks.discard)
                continue
            future = self.pending.pop(message.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(message)

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> Any:
        mid = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[mid] = future
        message: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        await self.ws.send(json.dumps(message))
        async with asyncio.timeout(STEP_TIMEOUT_SECONDS):
            answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.reader
        await self.ws.close()


class Page:
    def __init__(self, cdp: CDP, session: str) -> None:
        self.cdp = cdp
        self.session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.cdp.send(method, params, self.session)

    def on(self, event: str, handler: Callable[[dict[str, Any]], Any]) -> None:
        """Calls `handler(params)` on each `event` of this page (e.g. "Fetch.requestPaused")."""

        def for_this_page(params: dict[str, Any], session: str | None) -> Any:
            return handler(params) if session == self.session else None

        self.cdp.handlers.setdefault(event, []).append(for_this_page)

    async def eval(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, path: str) -> None:
        """Until the page at `path` has loaded (after a navigation or a form submission)."""
        deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):  # the context is replaced mid-navigation
                state = await self.eval("[location.pathname + location.search, document.readyState]")
                if state == [path, "complete"]:
                    return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"page {path} did not load")

    async def goto(self, url: str, path: str) -> None:
        await self.send("Page.navigate", {"url": url})
        await self.wait_for(path)


@contextlib.asynccontextmanager
async def chromium(profile: Path, extra_args: Sequence[str] = ()) -> AsyncIterator[Page]:
    from websockets.asyncio.client import connect

    assert CHROMIUM is not None
    proc = await asyncio.create_subprocess_exec(
        *[
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            *extra_args,
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cdp: CDP | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Chromium did not start (exit code {proc.returncode})")
            await asyncio.sleep(0.1)
        port, ws_path = port_file.read_text().splitlines()[:2]
        ws = await connect(f"ws://127.0.0.1:{port}{ws_path}", max_size=None)
        cdp = CDP(ws)
        target = await cdp.send("Target.createTarget", {"url": "about:blank"})
        attached = await cdp.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(cdp, attached["sessionId"])
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.send("Network.enable")
        yield page
    finally:
        if cdp is not None:
            with contextlib.suppress(Exception):
                await cdp.send("Browser.close")
            await cdp.close()
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


# --- a /ui session for an HTTP test client ----------------------------------------------------

UI_COOKIE = "haki_ui_session"  # service/api/ui.py
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass(frozen=True)
class UiSession:
    """What a logged-in browser holds: the session cookie (as a header) and the CSRF token the
    session's forms carry."""

    headers: dict[str, str]
    csrf: str
    cookie: str

    def form(self, **fields: str) -> dict[str, str]:
        return {"csrf_token": self.csrf, **fields}


async def ui_login(client: Any, key: str) -> UiSession:
    """Logs in at /ui/login with `key` and reads the CSRF token off a page; the client's own
    cookie jar is cleared, so each request names its session explicitly."""
    r = await client.post("/ui/login", data={"key": key})
    assert r.status_code == 303, r.text
    cookie = r.cookies[UI_COOKIE]
    client.cookies.clear()
    headers = {"Cookie": f"{UI_COOKIE}={cookie}"}
    page = await client.get("/ui/subjects", headers=headers)
    found = _CSRF.search(page.text)
    assert page.status_code == 200 and found is not None, page.text
    return UiSession(headers=headers, csrf=found.group(1), cookie=cookie)
