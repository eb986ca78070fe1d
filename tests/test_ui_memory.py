"""The memory browser (/ui): server-side sessions, CSRF, the pages of a subject's memory, and the
actions (resolve, retract, supersede, erase), each checked through the JSON API.

The same pages are driven in a real headless Chromium by tests/test_ui_memory_browser.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from html.parser import HTMLParser
from typing import Any, NamedTuple

import asyncpg
import pytest

from service.api import auth
from service.embedding.embedder import Embedder
from service.settings import Settings
from tests.helpers import (
    bearer,
    context,
    get_fact,
    inspect,
    json_of,
    list_all_facts,
    write_events,
    write_facts,
)
from tests.helpers.app import make_client
from tests.helpers.chromium import UI_COOKIE, UiSession, ui_login

SUBJECT = "mia/support"  # a `/`: the subject travels in the query, never in the path
XSS = '<script>alert("pwned")</script>'


async def seed(client: Any, key: str, subject: str = SUBJECT) -> dict[str, Any]:
    hooli, piper, note = await write_facts(
        client,
        key,
        [
            {"content": "Mia works at Hooli.", "key": "employer"},
            {"content": "Mia works at Pied Piper.", "key": "employer"},
            f"Mia's note: {XSS}",
        ],
        subject,
    )
    (event,) = json_of(
        await client.post(
            "/v1/events",
            json={
                "subject_id": subject,
                "events": [{"content": "Mia joined the call.", "occurred_at": "2025-02-03T10:00:00Z"}],
            },
            headers=bearer(key),
        ),
        201,
    )["events"]
    packet = await context(client, key, "Where does Mia work?", subject)
    return {
        "conflict": hooli["conflict_set_id"],
        "hooli": hooli["fact_id"],
        "piper": piper["fact_id"],
        "note": note["fact_id"],
        "event": event["event_id"],
        "trace": packet["trace_id"],
    }


class Seeded(NamedTuple):
    """A client, the project's key, the ids `seed` wrote with it and a /ui session of the key."""

    client: Any
    key: str
    ids: dict[str, Any]
    session: UiSession


@pytest.fixture
async def ui(client: Any, key: str) -> Seeded:
    return Seeded(client, key, await seed(client, key), await ui_login(client, key))


def actions_logged(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.haki_ui for r in caplog.records if r.name == "haki.ui" and hasattr(r, "haki_ui")]


class _Forms(HTMLParser):
    """Each form of a page by id: its action and its hidden and textarea fields."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, tuple[str, list[list[str]]]] = {}
        self._open: tuple[str, list[list[str]]] | None = None
        self._textarea: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._open = self.forms[a.get("id", "")] = (a["action"], [])
        elif self._open is not None and tag == "input" and a.get("type") == "hidden":
            self._open[1].append([a["name"], a.get("value", "")])
        elif self._open is not None and tag == "textarea":
            self._textarea = [a["name"], ""]
            self._open[1].append(self._textarea)

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._open = None


async def submit_as_browser(client: Any, session: UiSession, page: Any, form_id: str, **typed: str) -> Any:
    """Posts the form `form_id` of `page` as a browser does (HTML's parsing, then its form
    submission): the page's line breaks read as LF, each field's sent as CRLF. `typed` is what
    a visitor typed into a field."""
    assert page.status_code == 200, page.text
    parser = _Forms()
    parser.feed(page.text.replace("\r\n", "\n").replace("\r", "\n"))
    action, fields = parser.forms[form_id]
    values = {name: value for name, value in fields} | typed
    crlf = {name: re.sub(r"\r\n|\r|\n", "\r\n", value) for name, value in values.items()}
    return await client.post(action, data=crlf, headers=session.headers)


# --- the session ----------------------------------------------------------------------------


def refusal(page: Any) -> str:
    """The message of a UI error page (an HTML page, not the API's JSON body)."""
    assert page.headers["content-type"].startswith("text/html"), page.text
    found = re.search(r"<h1>Refused</h1>\s*<p>(.*?)</p>", page.text, re.S)
    assert found is not None, page.text
    return found.group(1)


async def test_the_cookie_holds_a_session_never_the_key(
    client: Any, key: str, conn: asyncpg.Connection
) -> None:
    r = await client.post("/ui/login", data={"key": key})
    assert r.status_code == 303 and r.headers["location"] == "/ui/subjects"
    set_cookie = r.headers["set-cookie"]
    attributes = {a.strip().split("=")[0].lower() for a in set_cookie.split(";")}
    assert {"httponly", "samesite", "path"} <= attributes and "secure" not in attributes
    assert re.search(r"samesite=strict", set_cookie, re.I) and re.search(r"path=/ui(;|$)", set_cookie, re.I)
    value = r.cookies[UI_COOKIE]
    client.cookies.clear()
    assert key not in set_cookie and key[3:20] not in value
    # The server keeps the secret's SHA-256 only, and the session names the key's id, not the key.
    secret = value.split(".")[1]
    stored = await conn.fetch("SELECT session_hash, key_id FROM ui_sessions WHERE project_id = 'proj-a'")
    assert [row["session_hash"] for row in stored] == [hashlib.sha256(secret.encode()).digest()]
    # A cookie that is the raw key opens nothing.
    refused = await client.get("/ui/subjects", headers={"Cookie": f"{UI_COOKIE}={key}"})
    assert refused.status_code == 303 and refused.headers["location"] == "/ui/login"


async def test_the_cookie_is_secure_behind_tls(client: Any, key: str) -> None:
    r = await client.post("/ui/login", data={"key": key}, headers={"X-Forwarded-Proto": "https"})
    client.cookies.clear()
    assert r.status_code == 303 and "secure" in r.headers["set-cookie"].lower()


async def test_logout_ends_the_session(client: Any, key: str) -> None:
    session = await ui_login(client, key)
    assert (await client.get("/ui/subjects", headers=session.headers)).status_code == 200
    # Logging out is a state change like any other: without the token it is refused.
    refused = await client.post("/ui/logout", headers=session.headers)
    assert refused.status_code == 403
    out = await client.post("/ui/logout", data=session.form(), headers=session.headers)
    assert out.status_code == 303 and "max-age=0" in out.headers["set-cookie"].lower()
    client.cookies.clear()
    # The same cookie, replayed after the logout, opens nothing.
    again = await client.get("/ui/subjects", headers=session.headers)
    assert again.status_code == 303 and again.headers["location"] == "/ui/login"


async def test_revoking_the_key_ends_its_sessions(client: Any, conn: asyncpg.Connection) -> None:
    _, doomed = await auth.create_key(conn, "proj-a")
    session = await ui_login(client, doomed)
    assert await auth.revoke_key(conn, doomed)
    r = await client.get("/ui/subjects", headers=session.headers)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"


async def test_an_expired_session_opens_nothing(client: Any, key: str, conn: asyncpg.Connection) -> None:
    session = await ui_login(client, key)
    await conn.execute("UPDATE ui_sessions SET expires_at = now() - interval '1 second'")
    r = await client.get("/ui/subjects", headers=session.headers)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    # The next login of the project forgets it.
    await ui_login(client, key)
    assert await conn.fetchval("SELECT count(*) FROM ui_sessions WHERE expires_at <= now()") == 0


# --- CSRF -----------------------------------------------------------------------------------


async def test_a_post_without_the_token_or_from_another_site_changes_nothing(
    ui: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    client, key, ids, session = ui
    url = f"/ui/facts/{ids['note']}/retract"
    attempts = [
        ({"confirm": "yes"}, {}),  # no token
        ({"confirm": "yes", "csrf_token": "forged"}, {}),  # a wrong one
        (session.form(confirm="yes"), {"Origin": "http://evil.example"}),  # the right one, another site
        (session.form(confirm="yes"), {"Origin": "null"}),  # an opaque origin
        (session.form(confirm="yes"), {"Referer": "http://evil.example/page"}),  # no Origin, a Referer
    ]
    with caplog.at_level(logging.WARNING, logger="haki.ui"):
        for form, extra in attempts:
            r = await client.post(url, data=form, headers={**session.headers, **extra})
            assert r.status_code == 403, (form, extra, r.text)
            assert "Refused" in r.text
    assert (await get_fact(client, key, ids["note"]))["status"] == "active"
    assert len([r for r in caplog.records if r.name == "haki.ui" and "refused" in r.getMessage()]) == 5
    # A login from another site is refused too (no session is opened for the attacker's key).
    r = await client.post("/ui/login", data={"key": key}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "set-cookie" not in r.headers
    # The same POST from this site's own page goes through.
    ok = await client.post(
        url, data=session.form(confirm="yes"), headers={**session.headers, "Origin": "http://testserver"}
    )
    assert ok.status_code == 303
    assert (await get_fact(client, key, ids["note"]))["status"] == "retracted"


# --- the pages ------------------------------------------------------------------------------


async def test_subjects_are_listed_with_counts_searchable_and_paged(client: Any, key: str) -> None:
    await seed(client, key)
    for subject in ("zed-1", "Zed-2", "amy"):
        await write_facts(client, key, [f"{subject} likes tea."], subject)
    session = await ui_login(client, key)
    page = (await client.get("/ui/subjects", headers=session.headers)).text
    rows = re.findall(r'<tr class="subject" data-subject-id="([^"]+)">', page)
    assert rows == sorted(rows) and {"amy", "mia/support", "zed-1", "Zed-2"} <= set(rows)
    mia = page[page.index('data-subject-id="mia/support"') :].split("</tr>")[0]
    cells = re.findall(r'<td class="num">(?:<span class="badge degraded">)?(\d+)', mia)
    assert cells == ["3", "1", "1"]  # facts, events, open conflicts
    # Search: any case, anywhere in the id.
    found = (await client.get("/ui/subjects", params={"q": "ZED"}, headers=session.headers)).text
    assert re.findall(r'data-subject-id="([^"]+)"', found) == sorted(["zed-1", "Zed-2"])
    # Paging: two a page, following the cursor to the end, each subject once.
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    for _ in range(10):
        r = await client.get("/ui/subjects", params=params, headers=session.headers)
        seen += re.findall(r'data-subject-id="([^"]+)"', r.text)
        more = re.search(r'id="next-page" href="/ui/subjects\?cursor=([^&"]+)', r.text)
        if more is None:
            break
        params = {"limit": 2, "cursor": more.group(1)}
    assert seen == rows


async def test_the_subjects_page_follows_the_longest_cursor(client: Any, key: str) -> None:
    """A subject id of 200 four-byte characters makes the longest cursor the page links to."""
    longest = ["\U0001f600" * 200, "\U0001f601" * 200]
    for subject in longest:
        await write_facts(client, key, ["a fact"], subject)
    session = await ui_login(client, key)
    r = await client.get("/ui/subjects", params={"limit": 1}, headers=session.headers)
    more = re.search(r'id="next-page" href="/ui/subjects\?cursor=([^&"]+)', r.text)
    assert more is not None and len(more.group(1)) == 1076
    r = await client.get(
        "/ui/subjects", params={"limit": 1, "cursor": more.group(1)}, headers=session.headers
    )
    assert r.status_code == 200, r.text
    assert re.findall(r'data-subject-id="([^"]+)"', r.text) == longest[1:]


async def test_a_subject_page_shows_facts_events_conflicts_and_calls(ui: Seeded) -> None:
    client, _, ids, session = ui
    r = await client.get("/ui/subject", params={"subject_id": SUBJECT}, headers=session.headers)
    assert r.status_code == 200, r.text
    page = r.text
    assert "<script>" not in page and "&lt;script&gt;" in page
    facts = dict(re.findall(r'<tr class="fact \w+" data-fact-id="([^"]+)" data-status="(\w+)"', page))
    assert facts == {ids["hooli"]: "active", ids["piper"]: "active", ids["note"]: "active"}
    assert f'data-event-id="{ids["event"]}"' in page
    # The open conflict, its members side by side, and the recent call linked to its trace.
    assert f'data-conflict-set-id="{ids["conflict"]}"' in page
    assert page.count('<div class="member">') == 2
    assert f'href="/ui/traces/{ids["trace"]}"' in page
    # A subject that holds nothing is a 404, and a bad subject id a 400 naming the parameter.
    missing = await client.get("/ui/subject", params={"subject_id": "nobody"}, headers=session.headers)
    assert missing.status_code == 404
    bad = await client.get("/ui/subject", params={"subject_id": "s" * 201}, headers=session.headers)
    assert bad.status_code == 400 and refusal(bad).startswith("subject_id")
    # A bad cursor is an error page naming the page's own parameter.
    for name in ("facts_cursor", "events_cursor"):
        params = {"subject_id": SUBJECT, name: "zzzz"}
        bad = await client.get("/ui/subject", params=params, headers=session.headers)
        assert bad.status_code == 422 and refusal(bad).startswith(f"{name}:"), bad.text
    bad = await client.get(
        "/ui/subject", params={"subject_id": SUBJECT, "facts_cursor": "z" * 65}, headers=session.headers
    )
    assert bad.status_code == 400 and "facts_cursor" in refusal(bad), bad.text
    bad = await client.get("/ui/subjects", params={"cursor": "zzzz"}, headers=session.headers)
    assert bad.status_code == 422 and refusal(bad).startswith("cursor:"), bad.text


async def test_the_trace_page_links_each_blocked_fact_to_its_conflict(ui: Seeded) -> None:
    client, key, ids, session = ui
    trace = await inspect(client, key, ids["trace"])
    blocked = {d["item_id"] for d in trace["decisions"] if d["reason_code"] == "conflict_open"}
    assert blocked == {ids["hooli"], ids["piper"]}
    page = (await client.get(f"/ui/traces/{ids['trace']}", headers=session.headers)).text
    for fact_id in blocked:
        row = page[page.index(f'data-item-id="{fact_id}"') :].split("</tr>")[0]
        assert f'href="/ui/conflicts/{ids["conflict"]}"' in row
    conflict = (await client.get(f"/ui/conflicts/{ids['conflict']}", headers=session.headers)).text
    members = re.findall(r'<div class="member (\w+)" data-fact-id="([^"]+)"', conflict)
    assert sorted(members) == sorted([("active", ids["hooli"]), ("active", ids["piper"])])
    assert conflict.count('name="keep"') == 2


# --- the actions, each checked through the API ----------------------------------------------


async def test_resolve_a_conflict_after_confirming(ui: Seeded, caplog: pytest.LogCaptureFixture) -> None:
    client, key, ids, session = ui
    url = f"/ui/conflicts/{ids['conflict']}/resolve"
    confirm = await client.post(url, data=session.form(keep=ids["piper"]), headers=session.headers)
    assert confirm.status_code == 200 and 'id="confirm-form"' in confirm.text
    assert (
        'name="confirm" value="yes"' in confirm.text and f'name="keep" value="{ids["piper"]}"' in confirm.text
    )
    assert (await get_fact(client, key, ids["hooli"]))["conflict_set_id"] == ids["conflict"]  # not yet
    with caplog.at_level(logging.INFO, logger="haki.ui"):
        done = await client.post(
            url, data=session.form(keep=ids["piper"], confirm="yes"), headers=session.headers
        )
    assert (
        done.status_code == 303
        and done.headers["location"] == f"/ui/conflicts/{ids['conflict']}?done=resolved"
    )
    (resolved,) = json_of(
        await client.get("/v1/conflicts", params={"subject_id": SUBJECT}, headers=bearer(key))
    )["conflicts"]
    assert resolved["status"] == "resolved"
    assert {m["fact_id"]: m["status"] for m in resolved["members"]} == {
        ids["piper"]: "active",
        ids["hooli"]: "superseded",
    }
    (logged,) = actions_logged(caplog)
    assert logged["action"] == "resolve_conflict" and logged["kept"] == [ids["piper"]]
    assert logged["superseded"] == [ids["hooli"]] and logged["project_id"] == "proj-a"
    # The line is one JSON object: a subject id cannot forge another field.
    line = next(r.getMessage() for r in caplog.records if r.name == "haki.ui")
    assert json.loads(line.removeprefix("ui action "))["outcome"] == "resolved"
    # Resolving it again is the API's 409, shown as a page.
    again = await client.post(
        url, data=session.form(keep=ids["piper"], confirm="yes"), headers=session.headers
    )
    assert again.status_code == 409 and "already resolved" in again.text
    # A keep that is no id is a 400 naming the field; nothing is asked to confirm.
    bad = await client.post(url, data=session.form(keep="garbage"), headers=session.headers)
    assert bad.status_code == 400 and "keep" in bad.text


async def test_retract_a_fact_after_confirming(ui: Seeded, caplog: pytest.LogCaptureFixture) -> None:
    client, key, ids, session = ui
    url = f"/ui/facts/{ids['note']}/retract"
    confirm = await client.post(url, data=session.form(), headers=session.headers)
    assert confirm.status_code == 200 and 'data-kind="retract"' in confirm.text
    assert (await get_fact(client, key, ids["note"]))["status"] == "active"
    with caplog.at_level(logging.INFO, logger="haki.ui"):
        done = await client.post(url, data=session.form(confirm="yes"), headers=session.headers)
    assert done.status_code == 303
    fact = await get_fact(client, key, ids["note"])
    assert fact["status"] == "retracted" and fact["recorded_to"] is not None
    assert [a["action"] for a in actions_logged(caplog)] == ["retract_fact"]
    page = (await client.get(done.headers["location"], headers=session.headers)).text
    assert 'id="done"' in page and 'id="retract-form"' not in page


async def test_supersede_a_fact_with_new_content(ui: Seeded, caplog: pytest.LogCaptureFixture) -> None:
    client, key, ids, session = ui
    url = f"/ui/facts/{ids['note']}/supersede"
    # Empty content is a 400 naming the field.
    empty = await client.post(url, data=session.form(content="  ", confirm="yes"), headers=session.headers)
    assert empty.status_code == 400 and "content" in empty.text
    confirm = await client.post(
        url, data=session.form(content="Mia's note, corrected."), headers=session.headers
    )
    assert confirm.status_code == 200 and "Mia&#39;s note, corrected." in confirm.text
    assert (await get_fact(client, key, ids["note"]))["status"] == "active"
    with caplog.at_level(logging.INFO, logger="haki.ui"):
        done = await client.post(
            url, data=session.form(content="Mia's note, corrected.", confirm="yes"), headers=session.headers
        )
    assert done.status_code == 303
    new_id = re.fullmatch(r"/ui/facts/([0-9a-f-]+)\?done=superseded", done.headers["location"])
    assert new_id is not None
    new = await get_fact(client, key, new_id.group(1))
    assert new["content"] == "Mia's note, corrected." and new["supersedes"] == ids["note"]
    assert new["subject_id"] == SUBJECT and new["status"] == "active"
    assert (await get_fact(client, key, ids["note"]))["status"] == "superseded"
    (logged,) = actions_logged(caplog)
    assert logged["action"] == "supersede_fact" and logged["new_fact_id"] == new_id.group(1)
    old_page = (await client.get(f"/ui/facts/{ids['note']}", headers=session.headers)).text
    assert f'href="/ui/facts/{new_id.group(1)}"' in old_page


async def test_a_fact_page_names_its_successor_however_many_facts_came_between(ui: Seeded) -> None:
    """The successor is read by its `supersedes`, not looked for in a page of the subject's facts."""
    client, key, ids, session = ui
    await write_facts(client, key, [f"filler fact {i}" for i in range(501)], SUBJECT)
    (new,) = await write_facts(client, key, [{"content": "A later note", "supersedes": ids["note"]}], SUBJECT)
    old_page = (await client.get(f"/ui/facts/{ids['note']}", headers=session.headers)).text
    assert re.findall(r'class="replaced-by" href="/ui/facts/([0-9a-f-]+)"', old_page) == [new["fact_id"]]


async def test_erase_a_subject_and_see_the_counts(ui: Seeded, caplog: pytest.LogCaptureFixture) -> None:
    client, key, ids, session = ui
    confirm = await client.post(
        "/ui/subject/erase", data=session.form(subject_id=SUBJECT), headers=session.headers
    )
    assert confirm.status_code == 200 and 'data-kind="erase"' in confirm.text
    assert "3 fact(s)" in confirm.text and "1 event(s)" in confirm.text
    assert json_of(await client.get(f"/v1/facts/{ids['note']}", headers=bearer(key)))["status"] == "active"
    with caplog.at_level(logging.INFO, logger="haki.ui"):
        done = await client.post(
            "/ui/subject/erase", data=session.form(subject_id=SUBJECT, confirm="yes"), headers=session.headers
        )
    assert done.status_code == 200, done.text
    counts = dict(re.findall(r'data-count="(\w+)">(\d+)<', done.text))
    assert counts["facts"] == "3" and counts["events"] == "1" and counts["conflict_sets"] == "1"
    assert counts["context_calls"] == "1" and int(counts["decisions"]) >= 3
    (logged,) = actions_logged(caplog)
    assert logged["action"] == "erase_subject" and logged["counts"]["facts"] == 3
    assert (await client.get(f"/v1/facts/{ids['note']}", headers=bearer(key))).status_code == 404
    assert (await client.get(f"/v1/inspect/{ids['trace']}", headers=bearer(key))).status_code == 404
    gone = await client.get("/ui/subject", params={"subject_id": SUBJECT}, headers=session.headers)
    assert gone.status_code == 404


async def test_erase_takes_the_subject_id_as_written_spaces_included(ui: Seeded) -> None:
    client, key, _, session = ui
    await write_facts(client, key, ["kept"], subject_id="victim")
    await write_facts(client, key, ["erased"], subject_id="victim ")
    done = await client.post(
        "/ui/subject/erase",
        params={"subject_id": "victim "},
        data=session.form(confirm="yes"),
        headers=session.headers,
    )
    assert done.status_code == 200, done.text
    assert [f["content"] for f in await list_all_facts(client, key, subject_id="victim")] == ["kept"]
    assert await list_all_facts(client, key, subject_id="victim ") == []


async def test_erase_reaches_a_subject_id_whose_line_breaks_a_browser_rewrites(ui: Seeded) -> None:
    """A browser submits a form's line breaks as CRLF: the id travels in the action's query,
    percent-encoded, so `multi\nline` is erased, not 404, and never `multi\r\nline`."""
    client, key, _, session = ui
    odd = ["multi\nline", "multi\r\nline", "cr\ronly", "a+b c&d=e%20f#g?h"]
    for subject in [*odd, "multi line"]:
        await write_facts(client, key, [f"fact of {subject!r}"], subject_id=subject)
    for subject in odd:
        page = await client.get("/ui/subject", params={"subject_id": subject}, headers=session.headers)
        confirm = await submit_as_browser(client, session, page, "erase-form")
        assert confirm.status_code == 200 and 'data-kind="erase"' in confirm.text, (subject, confirm.text)
        done = await submit_as_browser(client, session, confirm, "confirm-form")
        assert done.status_code == 200 and 'id="erasure"' in done.text, (subject, done.text)
        assert await list_all_facts(client, key, subject_id=subject) == []
    left = [f["subject_id"] for f in await list_all_facts(client, key) if f["subject_id"] != SUBJECT]
    assert left == ["multi line"]


async def test_supersede_stores_the_textarea_line_breaks_as_lf(ui: Seeded) -> None:
    client, key, ids, session = ui
    page = await client.get(f"/ui/facts/{ids['note']}", headers=session.headers)
    confirm = await submit_as_browser(client, session, page, "supersede-form", content="line A\nline B")
    assert confirm.status_code == 200 and 'data-kind="supersede"' in confirm.text
    done = await submit_as_browser(client, session, confirm, "confirm-form", confirm="yes")
    assert done.status_code == 303, done.text
    new_id = done.headers["location"].removeprefix("/ui/facts/").removesuffix("?done=superseded")
    assert (await get_fact(client, key, new_id))["content"] == "line A\nline B"


async def test_only_an_active_member_of_a_conflict_is_offered_to_keep(ui: Seeded) -> None:
    client, key, ids, session = ui
    (initech,) = await write_facts(
        client, key, [{"content": "Mia works at Initech.", "key": "employer"}], SUBJECT
    )
    assert initech["conflict_set_id"] == ids["conflict"]
    r = await client.patch(f"/v1/facts/{ids['hooli']}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text
    page = await client.get(f"/ui/conflicts/{ids['conflict']}", headers=session.headers)
    assert 'id="conflict-status" class="badge degraded">open' in page.text
    offered = re.findall(r'name="keep" value="([0-9a-f-]+)"', page.text)
    assert sorted(offered) == sorted([ids["piper"], initech["fact_id"]])
    assert f'data-fact-id="{ids["hooli"]}"' in page.text  # shown, without a checkbox
    # Kept anyway (a stale page): refused before a confirm page that would say it stays active.
    url = f"/ui/conflicts/{ids['conflict']}/resolve"
    stale = await client.post(url, data=session.form(keep=ids["hooli"]), headers=session.headers)
    assert stale.status_code == 422 and "only an active member can be kept" in stale.text
    assert 'id="confirm-form"' not in stale.text
    confirm = await client.post(url, data=session.form(keep=ids["piper"]), headers=session.headers)
    verdicts = dict(re.findall(r'data-fact-id="([0-9a-f-]+)">\s*<p class="verdict">([^<]+)<', confirm.text))
    assert verdicts == {
        ids["piper"]: "Stays active",
        initech["fact_id"]: "Becomes superseded",
        ids["hooli"]: "Stays retracted",
    }


async def test_a_refused_action_keeps_its_retry_after(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with make_client(settings, conn, hash_embedder, embed_chars_per_minute=100) as client:
        # A write larger than the budget passes a full one and overdraws it.
        (fact,) = await write_facts(client, key, ["x" * 300], SUBJECT)
        session = await ui_login(client, key)
        r = await client.post(
            f"/ui/facts/{fact['fact_id']}/supersede",
            data=session.form(content="y", confirm="yes"),
            headers=session.headers,
        )
    assert r.status_code == 429 and r.headers["content-type"].startswith("text/html"), r.text
    assert int(r.headers["retry-after"]) >= 1


async def test_a_year_before_1000_has_four_digits(ui: Seeded) -> None:
    client, key, _, session = ui
    (fact,) = await write_facts(
        client, key, [{"content": "Ancient.", "valid_from": "0001-01-01T00:00:01Z"}], SUBJECT
    )
    page = await client.get(f"/ui/facts/{fact['fact_id']}", headers=session.headers)
    assert "0001-01-01 00:00:01 →" in page.text, page.text


# --- isolation ------------------------------------------------------------------------------


async def test_another_projects_session_gets_404_on_every_object(
    client: Any, key: str, other_key: str
) -> None:
    ids = await seed(client, key)
    await write_events(client, other_key, [("B's own event.", "2025-01-01T00:00:00Z")], "b-subject", "proj-b")
    b: UiSession = await ui_login(client, other_key)
    for url in (
        f"/ui/facts/{ids['note']}",
        f"/ui/conflicts/{ids['conflict']}",
        f"/ui/traces/{ids['trace']}",
        f"/ui/subject?subject_id={SUBJECT.replace('/', '%2F')}",
    ):
        r = await client.get(url, headers=b.headers)
        assert r.status_code == 404, (url, r.text)
        assert "Mia" not in r.text
    posts = [
        (f"/ui/facts/{ids['note']}/retract", b.form(confirm="yes")),
        (f"/ui/facts/{ids['note']}/supersede", b.form(content="taken over", confirm="yes")),
        (f"/ui/conflicts/{ids['conflict']}/resolve", b.form(keep=ids["hooli"], confirm="yes")),
        ("/ui/subject/erase", b.form(subject_id=SUBJECT)),
    ]
    for url, form in posts:
        r = await client.post(url, data=form, headers=b.headers)
        assert r.status_code == 404, (url, r.text)
        assert "Mia" not in r.text
    listing = (await client.get("/ui/subjects", headers=b.headers)).text
    assert SUBJECT not in listing and "b-subject" in listing
    # A's memory is untouched.
    assert (await get_fact(client, key, ids["note"]))["status"] == "active"
    assert (await get_fact(client, key, ids["hooli"]))["conflict_set_id"] == ids["conflict"]
