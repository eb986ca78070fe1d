"""The trace inspector end to end in headless Chromium, driven over the DevTools protocol.

A real `haki serve` subprocess, a real browser: log in through the form, read the cookie the
browser kept, open a trace, assert on the DOM, and save a full-page screenshot (its path is
printed; set HAKI_UI_SCREENSHOT_DIR to keep it somewhere known).

Skips when no Chromium is installed (Debian: `apt-get install -y chromium`).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.chromium import BROWSER_TEST, UI_COOKIE, chromium
from tests.helpers.server import Server

pytestmark = BROWSER_TEST

PROJECT = "ui-browser"
SUBJECT = "zoe"
XSS_TITLE = "pwned"
XSS = f"<img src=x onerror=\"document.title='{XSS_TITLE}'\"><script>document.title='{XSS_TITLE}'</script>"
QUERY = f"Where does Zoe work? {XSS}"


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded(server: Server) -> dict[str, Any]:
    key = server.create_key(PROJECT)
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=30) as api:
        r = api.post(
            "/v1/facts",
            json={
                "project_id": PROJECT,
                "subject_id": SUBJECT,
                "facts": [
                    {"content": "Zoe works at Hooli.", "key": "employer"},
                    {"content": "Zoe works at Pied Piper.", "key": "employer"},
                    {"content": f"Zoe wrote in her bio: {XSS}"},
                    {"content": "Zoe leads the compression team at work, " + "and mentors interns " * 12},
                    {"content": "Zoe lives in Palo Alto.", "valid_from": "2023-05-01T00:00:00Z"},
                ],
            },
        )
        assert r.status_code == 201, r.text
        r = api.post(
            "/v1/events",
            json={
                "project_id": PROJECT,
                "subject_id": SUBJECT,
                "events": [
                    {
                        "content": "Zoe demoed the compression app at work.",
                        "occurred_at": "2025-02-03T10:00:00Z",
                    }
                ],
            },
        )
        assert r.status_code == 201, r.text
        r = api.post(
            "/v1/context",
            json={"project_id": PROJECT, "subject_id": SUBJECT, "query": QUERY, "budget_tokens": 60},
        )
        assert r.status_code == 200, r.text
        trace_id = r.json()["trace_id"]
        inspection = api.get(f"/v1/inspect/{trace_id}").json()
    return {"key": key, "trace_id": trace_id, "inspection": inspection}


def _screenshot_dir(tmp_path: Path) -> Path:
    chosen = os.environ.get("HAKI_UI_SCREENSHOT_DIR")
    path = Path(chosen) if chosen else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- the test --------------------------------------------------------------------------------


async def test_trace_inspector_in_chromium(server: Server, seeded: dict[str, Any], tmp_path: Path) -> None:
    key, trace_id, inspection = seeded["key"], seeded["trace_id"], seeded["inspection"]
    async with chromium(tmp_path / "profile") as page:
        # Not logged in: the pages send the browser to the login form.
        await page.goto(f"{server.url}/ui/traces/{trace_id}", "/ui/login")

        # Log in the way a person does: type the key, press the button.
        await page.eval("document.querySelector('#key').focus()")
        await page.send("Input.insertText", {"text": key})
        await page.eval("document.querySelector('form[action=\"/ui/login\"] button[type=submit]').click()")
        await page.wait_for("/ui/subjects")
        assert key not in await page.eval("location.href")
        assert await page.eval("document.cookie") == "", "the session cookie must be HttpOnly"
        cookies = (await page.send("Network.getCookies", {"urls": [f"{server.url}/ui/traces"]}))["cookies"]
        (cookie,) = [c for c in cookies if c["name"] == UI_COOKIE]
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        api_cookies = (await page.send("Network.getCookies", {"urls": [f"{server.url}/v1/facts"]}))["cookies"]
        assert not [c for c in api_cookies if c["name"] == UI_COOKIE], "the API never gets the session cookie"

        # The list of recent calls links to the trace.
        await page.goto(f"{server.url}/ui/traces", "/ui/traces")
        assert await page.eval(f"!!document.querySelector('a[href=\"/ui/traces/{trace_id}\"]')")
        listing = await page.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})

        await page.goto(f"{server.url}/ui/traces/{trace_id}", f"/ui/traces/{trace_id}")
        dom = await page.eval(
            """({
            title: document.title,
            query: document.querySelector('#query').textContent,
            meter: [document.querySelector('#budget').value, document.querySelector('#budget').max],
            rows: [...document.querySelectorAll('tr.decision')].map(tr => ({
                cls: tr.className, id: tr.dataset.itemId, reason: tr.dataset.reason,
                text: tr.querySelector('.content').textContent})),
            blockedSection: [...document.querySelectorAll('#blocked tr.decision')].length,
            warnings: [...document.querySelectorAll('#warnings li.warning')].map(li => li.textContent),
            images: document.images.length,
            scripts: document.scripts.length,
        })"""
        )
        shot = await page.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})

        # "Replay with…": half the budget, typed into the form of the trace page, submitted.
        assert await page.eval("!!document.querySelector('form#replay')")
        half = inspection["budget_tokens"] // 2
        await page.eval("document.querySelector('form#replay input[name=budget_tokens]').focus()")
        await page.send("Input.insertText", {"text": str(half)})
        await page.eval("document.querySelector('form#replay button[type=submit]').click()")
        await page.wait_for(f"/ui/traces/{trace_id}/replay")
        replayed = await page.eval(
            """({
            budget: document.querySelector('#replay-budget').textContent,
            removed: [...document.querySelectorAll('#removed tr.change')].map(tr => ({
                id: tr.dataset.itemId, before: tr.dataset.before, after: tr.dataset.after})),
            added: document.querySelectorAll('#added tr.change').length,
            replayTrace: document.querySelector('#replay-trace').getAttribute('href'),
            scripts: document.scripts.length,
        })"""
        )
        replay_shot = await page.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )

    png = _screenshot_dir(tmp_path) / "trace-inspector.png"
    png.write_bytes(base64.b64decode(shot["data"]))
    (png.parent / "recent-calls.png").write_bytes(base64.b64decode(listing["data"]))
    print(f"\nscreenshots: {png}, {png.parent / 'recent-calls.png'}")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000

    # The untrusted query is shown as text, and nothing it carried ran or became an element.
    assert dom["query"] == QUERY
    assert dom["title"] != XSS_TITLE and dom["images"] == 0 and dom["scripts"] == 0
    # A row per decision, each classed by its decision; blocked ones in their own section.
    decisions = inspection["decisions"]
    assert len(dom["rows"]) == len(decisions)
    by_id = {d["item_id"]: d for d in decisions}
    for row in dom["rows"]:
        decision = by_id[row["id"]]
        assert row["cls"] == f"decision {decision['decision']}"
        assert row["reason"] == decision["reason_code"]
    blocked = [d for d in decisions if d["decision"] == "blocked"]
    assert len(blocked) == 2 and dom["blockedSection"] == 2
    assert all(r["cls"] == "decision blocked" for r in dom["rows"] if by_id[r["id"]]["decision"] == "blocked")
    assert any(d["decision"] == "excluded" for d in decisions), "the budget should leave something out"
    assert any(XSS in r["text"] for r in dom["rows"])
    assert dom["warnings"] == inspection["warnings"] and dom["warnings"][0].startswith("open_conflict: 2")
    assert dom["meter"] == [inspection["used_tokens"], inspection["budget_tokens"]]

    # The replay page: half the budget drops served items to over_budget and adds none; the
    # diff agrees with the API's for the same override.
    (png.parent / "replay.png").write_bytes(base64.b64decode(replay_shot["data"]))
    assert replayed["budget"] == str(half) and replayed["scripts"] == 0
    assert replayed["added"] == 0 and replayed["removed"]
    assert all(
        r["before"] in ("packed", "multi_hop_expansion") and r["after"] == "over_budget"
        for r in replayed["removed"]
    )
    served_before = [d["item_id"] for d in decisions if d["decision"] == "included"]
    assert {r["id"] for r in replayed["removed"]} <= set(served_before)
    assert replayed["replayTrace"].startswith("/ui/traces/") and trace_id not in replayed["replayTrace"]
