"""No page of the service loads anything from another host (the API docs work offline).

Every HTML page the app serves is fetched (the test fails naming any HTML route it did not
visit, so a new page is covered or the test says so), and every URL it could load (src, href,
action, srcset, CSS url() and @import, in the page and in the stylesheets it links) must be the
service's own. The docs UI's assets are the bytes of the pinned PyPI package `swagger-ui-py`.
tests/test_docs_browser.py shows the same pages working in Chromium with the network cut off.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources
from importlib.metadata import version
from typing import Any
from urllib.parse import urljoin, urlsplit

from litestar.enums import MediaType
from litestar.routes import HTTPRoute

from service.api.docs_ui import DOCS_CSP
from service.app import create_app
from service.embedding.embedder import HashEmbedder
from service.settings import Settings
from tests.helpers import bearer
from tests.helpers.chromium import ui_login

BASE = "http://testserver"
# Attributes whose value the browser fetches or navigates to.
URL_ATTRIBUTES = {"src", "href", "action", "formaction", "srcset", "poster", "data", "background", "manifest"}
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""", re.IGNORECASE)
ABSOLUTE = re.compile(r"""(?:https?:)?//[^\s"'<>)]+""", re.IGNORECASE)


class _Urls(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_css: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in URL_ATTRIBUTES:
                parts = value.split(",") if name == "srcset" else [value]
                self.urls.extend(p.strip().split(" ")[0] for p in parts if p.strip())
            elif name == "style":
                self.inline_css.append(value)
        self._in_style = tag == "style"

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.inline_css.append(data)


def css_urls(css: str) -> list[str]:
    return [a or b for a, b in CSS_URL.findall(css)]


def is_own(url: str) -> bool:
    """Relative, data:, a fragment, or an absolute URL on the service's own host."""
    if url.startswith(("data:", "#", "about:blank")):
        return True
    parts = urlsplit(urljoin(BASE + "/", url))
    return parts.scheme in ("http", "https") and parts.netloc == urlsplit(BASE).netloc


def html_routes() -> set[tuple[str, str]]:
    """(method, path template) of every route answering HTML, from the app's own route table."""
    app = create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            media = getattr(handler.media_type, "value", handler.media_type)
            if str(media).startswith(MediaType.HTML.value):
                found.update((method, route.path) for method in handler.http_methods)
    return found


async def _seed_trace(client: Any, key: str) -> str:
    headers = bearer(key)
    r = await client.post(
        "/v1/facts",
        json={
            "project_id": "proj-a",
            "subject_id": "offline",
            "facts": [
                {"content": "Ada works at Hooli.", "key": "employer"},
                {"content": "Ada works at Initech.", "key": "employer"},
                {"content": "Ada lives in Oslo."},
            ],
        },
        headers=headers,
    )
    assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/context",
        json={"project_id": "proj-a", "subject_id": "offline", "query": "Where does Ada live?"},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    trace_id: str = r.json()["trace_id"]
    return trace_id


async def test_no_served_page_loads_anything_from_another_host(client: Any, key: str) -> None:
    trace_id = await _seed_trace(client, key)
    session = await ui_login(client, key)
    cookie = session.headers
    inspection = (await client.get(f"/v1/inspect/{trace_id}", headers=bearer(key))).json()
    fact_id = next(d["item_id"] for d in inspection["decisions"] if d["reason_code"] == "conflict_open")
    conflict = (await client.get("/v1/conflicts", headers=bearer(key))).json()["conflicts"][0]
    conflict_id = conflict["conflict_set_id"]
    # (method, route template) -> the request that renders it.
    visits: dict[tuple[str, str], tuple[str, str, dict[str, Any]]] = {
        ("GET", "/docs"): ("GET", "/docs", {}),
        ("GET", "/docs/swagger"): ("GET", "/docs/swagger", {}),
        ("GET", "/docs/{path:str}"): ("GET", "/docs/no-such-page", {}),
        ("GET", "/ui"): ("GET", "/ui", {}),
        ("GET", "/ui/login"): ("GET", "/ui/login", {}),
        ("POST", "/ui/login"): ("POST", "/ui/login", {"data": {"key": "hk_wrong"}}),
        ("GET", "/ui/traces"): ("GET", "/ui/traces", {"headers": cookie}),
        ("GET", "/ui/traces/{trace_id:uuid}"): ("GET", f"/ui/traces/{trace_id}", {"headers": cookie}),
        ("POST", "/ui/traces/{trace_id:uuid}/replay"): (
            "POST",
            f"/ui/traces/{trace_id}/replay",
            {"headers": cookie, "data": session.form(budget_tokens="5")},
        ),
        ("GET", "/ui/subjects"): ("GET", "/ui/subjects", {"headers": cookie}),
        ("GET", "/ui/webhooks"): ("GET", "/ui/webhooks", {"headers": cookie}),
        ("GET", "/ui/subject"): ("GET", "/ui/subject?subject_id=offline", {"headers": cookie}),
        ("GET", "/ui/facts/{fact_id:uuid}"): ("GET", f"/ui/facts/{fact_id}", {"headers": cookie}),
        ("GET", "/ui/conflicts/{conflict_set_id:uuid}"): (
            "GET",
            f"/ui/conflicts/{conflict_id}",
            {"headers": cookie},
        ),
        # The actions without `confirm`: their confirm pages.
        ("POST", "/ui/facts/{fact_id:uuid}/retract"): (
            "POST",
            f"/ui/facts/{fact_id}/retract",
            {"headers": cookie, "data": session.form()},
        ),
        ("POST", "/ui/facts/{fact_id:uuid}/supersede"): (
            "POST",
            f"/ui/facts/{fact_id}/supersede",
            {"headers": cookie, "data": session.form(content="Ada works at Hooli, still.")},
        ),
        ("POST", "/ui/conflicts/{conflict_set_id:uuid}/resolve"): (
            "POST",
            f"/ui/conflicts/{conflict_id}/resolve",
            {"headers": cookie, "data": session.form(keep=fact_id)},
        ),
        ("POST", "/ui/subject/erase"): (
            "POST",
            "/ui/subject/erase",
            {"headers": cookie, "data": session.form(subject_id="offline")},
        ),
    }
    routes = html_routes()
    assert ("GET", "/docs") in routes and ("GET", "/ui/traces") in routes
    unvisited = routes - visits.keys()
    assert not unvisited, f"HTML routes this test does not fetch yet (add them to `visits`): {unvisited}"

    pages = 0
    stylesheets: set[str] = set()
    for method, path, kwargs in visits.values():
        r = await client.request(method, path, **kwargs)
        assert r.status_code < 500, (path, r.status_code)
        if not r.headers.get("content-type", "").startswith("text/html"):
            continue  # a redirect
        pages += 1
        parser = _Urls()
        parser.feed(r.text)
        loads = parser.urls + [u for css in parser.inline_css for u in css_urls(css)]
        foreign = [u for u in loads if not is_own(u)]
        assert not foreign, f"{method} {path} loads from another host: {foreign}"
        # Not even a link or a mention: the plain text of the page names no other host.
        mentioned = [u for u in ABSOLUTE.findall(r.text) if not is_own(u)]
        assert not mentioned, f"{method} {path} names another host: {mentioned}"
        stylesheets.update(u for u in parser.urls if u.endswith(".css"))
    assert pages >= 7

    assert stylesheets >= {"/docs/assets/swagger-ui.css", "/ui/assets/haki.css"}
    for sheet in stylesheets:
        r = await client.get(sheet)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/css"), sheet
        foreign = [u for u in css_urls(r.text) if not is_own(u)]
        assert not foreign, f"{sheet} loads from another host: {foreign}"


async def test_docs_pages_use_the_pinned_swagger_ui_package(client: Any) -> None:
    assert version("swagger-ui-py") == "25.7.1"
    static = resources.files("swagger_ui") / "static"
    for name, media in (
        ("swagger-ui-bundle.js", "text/javascript"),
        ("swagger-ui.css", "text/css"),
        ("favicon-32x32.png", "image/png"),
    ):
        r = await client.get(f"/docs/assets/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(media), name
        assert r.content == (static / name).read_bytes(), name
    bundle = (static / "swagger-ui-bundle.js").read_text()
    assert '"5.24.2"' in bundle, "Swagger UI 5.x reads the OpenAPI 3.1 document Litestar writes"
    # Only the files the pages use are served; no path reaches the disk.
    for path in ("/docs/assets/swagger-editor-bundle.js", "/docs/assets/..%2Fapp.py", "/docs/assets/LICENSE"):
        assert (await client.get(path)).status_code == 404, path


async def test_docs_pages_forbid_other_hosts_by_policy(client: Any) -> None:
    for path in ("/docs", "/docs/swagger"):
        r = await client.get(path)
        assert r.status_code == 200
        csp = r.headers["content-security-policy"]
        assert csp == DOCS_CSP
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["default-src"] == "'none'"
        for name in ("script-src", "connect-src", "img-src", "style-src", "font-src"):
            sources = directives[name].split()
            assert all(s in ("'self'", "'unsafe-inline'", "data:") for s in sources), (name, sources)
        assert "'unsafe-inline'" not in directives["script-src"]
        assert 'data-url="/docs/openapi.json"' in r.text
