"""The trace inspector pages (/ui): cookie login, escaping of untrusted memory, every decision.

The same pages are driven in a real headless Chromium by tests/test_ui_browser.py.
"""

from __future__ import annotations

import html
import re
from typing import Any

import asyncpg

from service.api import auth
from tests.helpers import bearer, context, write_events, write_facts
from tests.helpers.chromium import UI_COOKIE, ui_login

XSS = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


async def login(client: Any, key: str) -> dict[str, str]:
    return (await ui_login(client, key)).headers


async def seed_trace(client: Any, key: str, subject: str = "ui-1") -> str:
    await write_facts(
        client,
        key,
        [
            f"Zoe's note: {XSS}",
            {"content": "Zoe works at Hooli.", "key": "employer"},
            {"content": "Zoe works at Pied Piper.", "key": "employer"},
            "Zoe lives in Palo Alto. " * 20,
        ],
        subject,
    )
    await write_events(client, key, [("Zoe demoed the compression app.", "2025-02-03T10:00:00Z")], subject)
    packet = await context(client, key, f"Where does Zoe work? {XSS}", subject, budget_tokens=40)
    trace_id: str = packet["trace_id"]
    return trace_id


async def test_pages_need_the_login_cookie(client: Any, key: str) -> None:
    for path in ("/ui/traces", "/ui/traces/01900000-0000-7000-8000-000000000000"):
        r = await client.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    # A bearer header is no way in: the pages read the cookie only.
    assert (await client.get("/ui/traces", headers=bearer(key))).status_code == 303
    # A cookie holding a bad key is dropped on the way to the login form.
    r = await client.get("/ui/traces", headers={"Cookie": f"{UI_COOKIE}=hk_wrong"})
    assert r.status_code == 303 and "max-age=0" in r.headers["set-cookie"].lower()


async def test_login_sets_an_httponly_strict_cookie_and_never_a_url(client: Any, key: str) -> None:
    form = await client.get("/ui/login")
    assert form.status_code == 200 and form.headers["content-type"].startswith("text/html")
    assert 'method="post" action="/ui/login"' in form.text and 'name="key"' in form.text

    bad = await client.post("/ui/login", data={"key": "hk_not_a_key"})
    assert bad.status_code == 401 and "Unknown or revoked API key" in bad.text
    assert "set-cookie" not in bad.headers

    r = await client.post("/ui/login", data={"key": key})
    assert r.status_code == 303 and key not in r.headers["location"]
    cookie = r.headers["set-cookie"]
    client.cookies.clear()
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")}
    assert cookie.startswith(f"{UI_COOKIE}=") and key not in cookie
    assert {"httponly", "samesite", "path"} <= attributes
    assert re.search(r"samesite=strict", cookie, re.I) and re.search(r"path=/ui(;|$)", cookie, re.I)

    session = await ui_login(client, key)
    out = await client.post("/ui/logout", data=session.form(), headers=session.headers)
    assert out.status_code == 303 and "max-age=0" in out.headers["set-cookie"].lower()
    client.cookies.clear()


async def test_trace_page_escapes_untrusted_text_and_shows_every_decision(
    client: Any, key: str, conn: asyncpg.Connection
) -> None:
    trace_id = await seed_trace(client, key)
    cookie = await login(client, key)
    inspection = (await client.get(f"/v1/inspect/{trace_id}", headers=bearer(key))).json()

    r = await client.get(f"/ui/traces/{trace_id}", headers=cookie)
    assert r.status_code == 200, r.text
    page = r.text
    assert "script-src" not in r.headers["content-security-policy"]  # default-src 'none' covers it
    assert r.headers["cache-control"] == "no-store"
    # Untrusted text is shown, escaped: never as markup.
    assert "<script>" not in page and "<img src=x" not in page
    assert html.escape(XSS, quote=False) in page or "&lt;script&gt;" in page
    assert "Where does Zoe work?" in page
    assert f'<code id="profile">{inspection["profile"]}</code>' in page  # which rules built it
    ranked = re.search(r'<dd id="ranked-with">(.*?)</dd>', page, re.S)  # and with which settings
    assert ranked is not None
    assert " / ".join(str(w) for w in inspection["weights"]) in ranked.group(1)
    assert f"<code>{inspection['text_search_config']}</code>" in ranked.group(1)

    rows = re.findall(r'<tr class="decision (\w+)" data-item-id="([0-9a-f-]+)" data-reason="(\w+)"', page)
    assert len(rows) == len(inspection["decisions"])
    expected = sorted((d["decision"], d["item_id"], d["reason_code"]) for d in inspection["decisions"])
    assert sorted(rows) == expected
    decisions = {d for d, _, _ in rows}
    assert {"included", "blocked", "excluded"} <= decisions
    assert '<section class="decisions blocked" id="blocked">' in page
    assert "open_conflict: 2 fact(s) hidden pending conflict resolution" in page
    used, budget = inspection["used_tokens"], inspection["budget_tokens"]
    assert f'<meter id="budget" min="0" max="{budget}" value="{used}">' in page

    listing = await client.get("/ui/traces?subject_id=ui-1", headers=cookie)
    assert listing.status_code == 200 and f"/ui/traces/{trace_id}" in listing.text
    assert "<script>" not in listing.text
    other = await client.get("/ui/traces?subject_id=someone-else", headers=cookie)
    assert f"/ui/traces/{trace_id}" not in other.text and "No context call yet" in other.text
    # The form's empty `subject_id=` means every subject; a non-empty one must be a scope id.
    every = await client.get("/ui/traces?subject_id=", headers=cookie)
    assert every.status_code == 200 and f"/ui/traces/{trace_id}" in every.text
    for bad in ("s" * 201, "a\x00b"):
        refused = await client.get("/ui/traces", params={"subject_id": bad}, headers=cookie)
        assert refused.status_code == 400 and refused.headers["content-type"].startswith("text/html")
        assert "<h1>Refused</h1>" in refused.text and "subject_id" in refused.text


async def test_a_key_sees_only_its_own_project(client: Any, key: str, conn: asyncpg.Connection) -> None:
    trace_id = await seed_trace(client, key, subject="ui-2")
    _, other_key = await auth.create_key(conn, "proj-other")
    cookie = await login(client, other_key)
    r = await client.get(f"/ui/traces/{trace_id}", headers=cookie)
    assert r.status_code == 404 and "Trace not found" in r.text
    listing = await client.get("/ui/traces", headers=cookie)
    assert trace_id not in listing.text


async def test_stylesheet_is_served_without_a_key(client: Any) -> None:
    r = await client.get("/ui/assets/haki.css")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/css")
    assert "section.decisions.blocked" in r.text


async def test_what_no_page_answers_is_an_error_page_with_the_pages_headers(client: Any, key: str) -> None:
    cookie = await login(client, key)
    for method, path, status in [
        ("GET", "/ui/facts/zz%3Cx%3E", 400),  # not a UUID: named, escaped
        ("GET", "/ui/traces/not-a-trace", 400),
        ("GET", "/ui/no-such-page%3Cb%3E", 404),
        ("GET", "/ui/logout", 405),
    ]:
        r = await client.request(method, path, headers=cookie)
        assert r.status_code == status, (path, r.text)
        assert r.headers["content-type"].startswith("text/html"), (path, r.headers)
        assert "<x>" not in r.text and "<b>" not in r.text, r.text
        assert "default-src 'none'" in r.headers["content-security-policy"], path
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store"
    assert "fact_id" in (await client.get("/ui/facts/zz", headers=cookie)).text
    assert "POST" in (await client.get("/ui/logout", headers=cookie)).headers["allow"]
    index = await client.get("/ui", headers=cookie)
    assert index.status_code == 303 and index.headers["x-frame-options"] == "DENY"
    # The JSON API's errors are unchanged.
    api = await client.get("/v1/facts/zz", headers=bearer(key))
    assert api.status_code == 400 and api.json()["details"]["field"] == "fact_id"


async def test_a_bidi_control_in_a_subject_id_cannot_reorder_the_page(client: Any, key: str) -> None:
    await write_facts(client, key, [{"content": "x", "key": "plan\u202e"}], "user-42\u202e")
    cookie = await login(client, key)
    page = await client.get("/ui/subject", params={"subject_id": "user-42\u202e"}, headers=cookie)
    assert page.status_code == 200
    assert "<title>Subject \u2068user-42\u202e\u2069 ·" in page.text
    css = (await client.get("/ui/assets/haki.css")).text
    assert re.search(r"(^|[\s,])code[\s,][^{]*\{[^}]*unicode-bidi: isolate", css, re.M), css
