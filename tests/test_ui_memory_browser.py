"""The memory browser end to end in headless Chromium, driven over the DevTools protocol.

A real `haki serve` subprocess and a real browser: log in through the form, browse the subjects,
a subject's memory, a trace whose blocked facts link to their conflict, and run each action
(resolve, supersede, retract, erase) through its confirm page, checking its effect through the
JSON API. Then a form posted from another origin (a page served on another port) is refused, and
another project's session gets a 404 on every object of the first. Screenshots of the pages go
to HAKI_UI_SCREENSHOT_DIR when it is set (docs/ui.md shows them), else to the test's tmp dir.

Skips when no Chromium is installed (Debian: `apt-get install -y chromium`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.helpers.chromium import BROWSER_TEST, UI_COOKIE, Page, chromium
from tests.helpers.server import Server
from tests.helpers.stub_http import stub_server

pytestmark = [*BROWSER_TEST, pytest.mark.slow]

PROJECT = "ui-memory"
OTHER = "ui-memory-b"
SUBJECT = "zoe"
XSS = "<img src=x onerror=\"document.title='pwned'\">"


@pytest.fixture(scope="module")
def seeded(server: Server) -> dict[str, Any]:
    key, other_key = server.create_key(PROJECT), server.create_key(OTHER)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        (event,) = api.post(
            "/v1/events",
            json={
                "subject_id": SUBJECT,
                "events": [
                    {"content": "Zoe said she moved to Pied Piper.", "occurred_at": "2025-02-03T10:00:00Z"}
                ],
            },
        ).json()["events"]
        r = api.post(
            "/v1/facts",
            json={
                "subject_id": SUBJECT,
                "facts": [
                    {
                        "content": "Zoe works at Hooli.",
                        "key": "employer",
                        "valid_from": "2021-01-01T00:00:00Z",
                    },
                    {
                        "content": "Zoe works at Pied Piper.",
                        "key": "employer",
                        "valid_from": "2025-02-01T00:00:00Z",
                        "source_event_id": event["event_id"],
                    },
                    {"content": "Zoe lives in Palo Alto.", "key": "city"},
                    {"content": f"Zoe's bio: {XSS}"},
                    {"content": "Zoe prefers tea over coffee."},
                ],
            },
        )
        assert r.status_code == 201, r.text
        hooli, piper, city, bio, tea = r.json()["facts"]
        for subject in ("zack", "yusuf"):
            api.post("/v1/facts", json={"subject_id": subject, "facts": [{"content": f"{subject} exists."}]})
        trace = api.post("/v1/context", json={"subject_id": SUBJECT, "query": "Where does Zoe work?"}).json()
    return {
        "key": key,
        "other_key": other_key,
        "conflict": hooli["conflict_set_id"],
        "hooli": hooli["fact_id"],
        "piper": piper["fact_id"],
        "city": city["fact_id"],
        "bio": bio["fact_id"],
        "tea": tea["fact_id"],
        "trace": trace["trace_id"],
    }


def _api(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


class Shots:
    """Screenshots of the viewport (small PNGs for docs/ui.md)."""

    def __init__(self, page: Page, tmp_path: Path) -> None:
        chosen = os.environ.get("HAKI_UI_SCREENSHOT_DIR")
        self.dir = Path(chosen) if chosen else tmp_path
        self.dir.mkdir(parents=True, exist_ok=True)
        self.page = page
        self.taken: list[Path] = []

    async def take(self, name: str) -> None:
        shot = await self.page.send("Page.captureScreenshot", {"format": "png"})
        path = self.dir / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        self.taken.append(path)


async def _submit(page: Page, form: str, path: str) -> None:
    await page.eval(f"document.querySelector('{form} button[type=submit]').click()")
    await page.wait_for(path)


async def _landed_on_new_fact(page: Page) -> str:
    """The id of the fact page a supersede redirects to (its id is not known before)."""
    for _ in range(400):
        with contextlib.suppress(RuntimeError):  # the context is replaced mid-navigation
            state = await page.eval("[location.pathname, location.search, document.readyState]")
            if state[1] == "?done=superseded" and state[2] == "complete":
                return str(state[0]).rsplit("/", 1)[1]
        await asyncio.sleep(0.05)
    raise TimeoutError("the supersede did not land on the new fact's page")


async def _wait_for_element(page: Page, selector: str) -> None:
    for _ in range(400):
        with contextlib.suppress(RuntimeError):
            if await page.eval(
                f"document.readyState == 'complete' && !!document.querySelector('{selector}')"
            ):
                return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no {selector} on the page")


async def _log_in(page: Page, url: str, key: str) -> None:
    await page.goto(f"{url}/ui/login", "/ui/login")
    await page.eval("document.querySelector('#key').focus()")
    await page.send("Input.insertText", {"text": key})
    await _submit(page, 'form[action="/ui/login"]', "/ui/subjects")


async def test_memory_browser_in_chromium(server: Server, seeded: dict[str, Any], tmp_path: Path) -> None:
    ids, url = seeded, server.url
    statuses: dict[str, int] = {}
    async with chromium(tmp_path / "profile", ["--window-size=1200,820"]) as page:
        page.on(
            "Network.responseReceived",
            lambda p: statuses.__setitem__(p["response"]["url"], p["response"]["status"]),
        )
        shots = Shots(page, tmp_path)

        # --- log in; the cookie is a session, HttpOnly and SameSite=Strict ---
        await page.goto(f"{url}/ui/subjects", "/ui/login")
        await _log_in(page, url, ids["key"])
        cookies = (await page.send("Network.getCookies", {"urls": [f"{url}/ui/subjects"]}))["cookies"]
        (cookie,) = [c for c in cookies if c["name"] == UI_COOKIE]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and ids["key"] not in cookie["value"]
        assert await page.eval("document.cookie") == ""

        # --- the subjects: counts, search ---
        rows = await page.eval(
            "[...document.querySelectorAll('tr.subject')].map(tr => [tr.dataset.subjectId,"
            " [...tr.querySelectorAll('td.num')].map(td => td.textContent.trim())])"
        )
        assert dict(rows)[SUBJECT] == ["5", "1", "1"]  # facts, events, open conflicts
        assert [r[0] for r in rows] == ["yusuf", "zack", "zoe"]
        await shots.take("subjects")
        await page.eval("document.querySelector('#q').value = 'ZO'")
        await _submit(page, "form.filter", "/ui/subjects?q=ZO")
        assert await page.eval(
            "[...document.querySelectorAll('tr.subject')].map(tr => tr.dataset.subjectId)"
        ) == [SUBJECT]

        # --- a subject: facts, events, its open conflict side by side, its calls ---
        await page.eval("document.querySelector('tr.subject a').click()")
        await page.wait_for(f"/ui/subject?subject_id={SUBJECT}")
        subject = await page.eval(
            """({
            facts: [...document.querySelectorAll('tr.fact')]
                .map(tr => [tr.dataset.factId, tr.dataset.status]),
            events: document.querySelectorAll('tr.event').length,
            members: [...document.querySelectorAll('#conflicts .member .content')].map(p => p.textContent),
            calls: [...document.querySelectorAll('#calls a')].map(a => a.getAttribute('href')),
            title: document.title, images: document.images.length, scripts: document.scripts.length,
        })"""
        )
        assert len(subject["facts"]) == 5 and all(status == "active" for _, status in subject["facts"])
        assert subject["events"] == 1
        assert sorted(subject["members"]) == ["Zoe works at Hooli.", "Zoe works at Pied Piper."]
        assert f"/ui/traces/{ids['trace']}" in subject["calls"]
        assert subject["title"] != "pwned" and subject["images"] == 0 and subject["scripts"] == 0
        await shots.take("subject")

        # --- the trace links each blocked fact to its conflict ---
        await page.goto(f"{url}/ui/traces/{ids['trace']}", f"/ui/traces/{ids['trace']}")
        links = await page.eval(
            "[...document.querySelectorAll('#blocked tr.decision')].map(tr => "
            "[tr.dataset.itemId, tr.querySelector('a.conflict-link').getAttribute('href')])"
        )
        assert dict(links) == {
            ids["hooli"]: f"/ui/conflicts/{ids['conflict']}",
            ids["piper"]: f"/ui/conflicts/{ids['conflict']}",
        }
        await page.eval("document.querySelector('#blocked a.conflict-link').click()")
        await page.wait_for(f"/ui/conflicts/{ids['conflict']}")

        # --- resolve: keep Pied Piper, confirm ---
        side = await page.eval(
            "[...document.querySelectorAll('.members .member')].map(m => "
            "[m.dataset.factId, m.getBoundingClientRect().top, m.getBoundingClientRect().left])"
        )
        assert len(side) == 2 and side[0][1] == side[1][1] and side[0][2] < side[1][2], "side by side"
        await shots.take("conflict")
        await page.eval(f"document.querySelector('input[name=keep][value=\"{ids['piper']}\"]').click()")
        await _submit(page, "#resolve-form", f"/ui/conflicts/{ids['conflict']}/resolve")
        verdicts = await page.eval(
            "[...document.querySelectorAll('#confirm .member')].map(m => [m.dataset.factId, m.className])"
        )
        assert dict(verdicts) == {ids["piper"]: "member kept", ids["hooli"]: "member dropped"}
        await shots.take("confirm-resolve")
        with _api(server, ids["key"]) as api:
            assert api.get(f"/v1/facts/{ids['hooli']}").json()["status"] == "active"  # not yet
        await _submit(page, "#confirm-form", f"/ui/conflicts/{ids['conflict']}?done=resolved")
        with _api(server, ids["key"]) as api:
            (resolved,) = api.get("/v1/conflicts", params={"subject_id": SUBJECT}).json()["conflicts"]
        assert resolved["status"] == "resolved"
        assert {m["fact_id"]: m["status"] for m in resolved["members"]} == {
            ids["piper"]: "active",
            ids["hooli"]: "superseded",
        }

        # --- supersede the city with new content, confirm ---
        await page.goto(f"{url}/ui/facts/{ids['city']}", f"/ui/facts/{ids['city']}")
        await shots.take("fact")
        await page.eval("document.querySelector('#supersede-form textarea').value = 'Zoe lives in Berlin.'")
        await _submit(page, "#supersede-form", f"/ui/facts/{ids['city']}/supersede")
        assert await page.eval("document.querySelector('#new-content').textContent") == "Zoe lives in Berlin."
        await page.eval("document.querySelector('#confirm-form button[type=submit]').click()")
        new_id = await _landed_on_new_fact(page)
        with _api(server, ids["key"]) as api:
            new = api.get(f"/v1/facts/{new_id}").json()
            old = api.get(f"/v1/facts/{ids['city']}").json()
        assert (
            new["content"] == "Zoe lives in Berlin."
            and new["supersedes"] == ids["city"]
            and new["key"] == "city"
        )
        assert old["status"] == "superseded"

        # --- retract the tea preference, confirm ---
        await page.goto(f"{url}/ui/facts/{ids['tea']}", f"/ui/facts/{ids['tea']}")
        await _submit(page, "#retract-form", f"/ui/facts/{ids['tea']}/retract")
        await _submit(page, "#confirm-form", f"/ui/facts/{ids['tea']}?done=retracted")
        with _api(server, ids["key"]) as api:
            assert api.get(f"/v1/facts/{ids['tea']}").json()["status"] == "retracted"

        # --- a form posted from another origin, even with the session's own token, is refused ---
        await page.goto(f"{url}/ui/facts/{ids['bio']}", f"/ui/facts/{ids['bio']}")
        token = await page.eval("document.querySelector('#retract-form input[name=csrf_token]').value")
        target = f"{url}/ui/facts/{ids['bio']}/retract"
        attack = (
            f'<!doctype html><form id="f" method="post" action="{target}">'
            f'<input name="csrf_token" value="{token}"><input name="confirm" value="yes">'
            '<button type="submit">win a prize</button></form>'
        ).encode()

        class Attacker(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(attack)))
                self.end_headers()
                self.wfile.write(attack)

            def log_message(self, *args: Any) -> None:
                pass

        with stub_server(Attacker) as port:
            await page.goto(f"http://127.0.0.1:{port}/prize", "/prize")
            await page.eval("document.querySelector('#f button').click()")
            await page.wait_for(f"/ui/facts/{ids['bio']}/retract")
            refused = await page.eval("document.querySelector('h1').textContent")
        assert refused == "Refused" and statuses[target] == 403
        with _api(server, ids["key"]) as api:
            assert api.get(f"/v1/facts/{ids['bio']}").json()["status"] == "active"

        # --- log out; another project's session gets a 404 on every object of this one ---
        await page.goto(f"{url}/ui/subjects", "/ui/subjects")
        await _submit(page, "form.logout", "/ui/login")
        cookies = (await page.send("Network.getCookies", {"urls": [f"{url}/ui/subjects"]}))["cookies"]
        assert not [c for c in cookies if c["name"] == UI_COOKIE]
        await _log_in(page, url, ids["other_key"])
        for path in (
            f"/ui/facts/{ids['bio']}",
            f"/ui/conflicts/{ids['conflict']}",
            f"/ui/traces/{ids['trace']}",
            f"/ui/subject?subject_id={SUBJECT}",
        ):
            await page.goto(f"{url}{path}", path)
            assert statuses[f"{url}{path}"] == 404, path
            assert "Zoe" not in await page.eval("document.body.textContent")
        await page.goto(f"{url}/ui/subjects", "/ui/subjects")
        assert await page.eval("document.querySelectorAll('tr.subject').length") == 0
        await _submit(page, "form.logout", "/ui/login")

        # --- erase the subject, confirm, and see the counts ---
        await _log_in(page, url, ids["key"])
        await page.goto(f"{url}/ui/subject?subject_id={SUBJECT}", f"/ui/subject?subject_id={SUBJECT}")
        await _submit(page, "#erase-form", f"/ui/subject/erase?subject_id={SUBJECT}")
        assert await page.eval("document.querySelector('#erase-subject').textContent") == SUBJECT
        await shots.take("confirm-erase")
        # The answer is at the same path as the confirm page: wait for its table instead.
        await page.eval("document.querySelector('#confirm-form button[type=submit]').click()")
        await _wait_for_element(page, "#erasure")
        counts = await page.eval(
            "Object.fromEntries([...document.querySelectorAll('#erasure td')].map(td => "
            "[td.dataset.count, Number(td.textContent)]))"
        )
        await shots.take("erased")
    assert counts["facts"] == 6 and counts["events"] == 1 and counts["conflict_sets"] == 1
    assert counts["context_calls"] >= 1
    with _api(server, ids["key"]) as api:
        assert api.get("/v1/facts", params={"subject_id": SUBJECT}).json()["facts"] == []
        assert api.get(f"/v1/inspect/{ids['trace']}").status_code == 404
    for shot in shots.taken:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print("\nscreenshots:", ", ".join(str(p) for p in shots.taken))


MULTI = "multi\nline"  # a legal subject id, which a form field would send back as multi\r\nline
LONG = "x" * 200  # the longest subject id, without a place to break


async def test_odd_subject_ids_in_chromium(server: Server, tmp_path: Path) -> None:
    """A subject id with a line break is erased (and its fact superseded with a multi-line
    textarea, stored with LF), not its CRLF twin; a 200-character id wraps within the window."""
    url, key = server.url, server.create_key("ui-memory-odd")
    with _api(server, key) as api:
        for subject in (MULTI, "multi\r\nline", LONG):
            r = api.post("/v1/facts", json={"subject_id": subject, "facts": [{"content": "A fact."}]})
            assert r.status_code == 201, r.text
        (fact,) = api.get("/v1/facts", params={"subject_id": MULTI}).json()["facts"]
        assert api.post("/v1/context", json={"subject_id": LONG, "query": "a fact"}).status_code == 200
    async with chromium(tmp_path / "profile", ["--window-size=1000,820"]) as page:
        await _log_in(page, url, key)
        for path in ("/ui/subjects", f"/ui/subject?subject_id={LONG}", "/ui/traces"):
            await page.goto(f"{url}{path}", path)
            widths = await page.eval(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert widths[0] <= widths[1], (path, widths)

        await page.goto(f"{url}/ui/facts/{fact['fact_id']}", f"/ui/facts/{fact['fact_id']}")
        await page.eval("document.querySelector('#supersede-form textarea').value = 'line A\\nline B'")
        await _submit(page, "#supersede-form", f"/ui/facts/{fact['fact_id']}/supersede")
        await page.eval("document.querySelector('#confirm-form button[type=submit]').click()")
        new_id = await _landed_on_new_fact(page)
        with _api(server, key) as api:
            assert api.get(f"/v1/facts/{new_id}").json()["content"] == "line A\nline B"

        quoted = quote(MULTI, safe="")
        await page.goto(f"{url}/ui/subject?subject_id={quoted}", f"/ui/subject?subject_id={quoted}")
        await _submit(page, "#erase-form", f"/ui/subject/erase?subject_id={quoted}")
        assert await page.eval("document.querySelector('#erase-subject').textContent") == MULTI
        await page.eval("document.querySelector('#confirm-form button[type=submit]').click()")
        await _wait_for_element(page, "#erasure")
        erased = await page.eval("document.querySelector('[data-count=facts]').textContent")
    assert erased == "2"
    with _api(server, key) as api:
        assert api.get(f"/v1/facts/{new_id}").status_code == 404  # erased, with its subject
        assert api.get("/v1/facts", params={"subject_id": MULTI}).json()["facts"] == []
        assert len(api.get("/v1/facts", params={"subject_id": "multi\r\nline"}).json()["facts"]) == 1
