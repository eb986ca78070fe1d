"""The trace inspector: server-rendered HTML pages under /ui, for people rather than agents.

    GET  /ui/login              form asking for a project API key
    POST /ui/login              checks the key, keeps it in an HttpOnly SameSite=Strict cookie
    POST /ui/logout             forgets it
    GET  /ui/traces?subject_id= the latest context calls of the key's project
    GET  /ui/traces/{trace_id}  one call: query, budget bar, every decision, warnings, and a
                                "replay with…" form (budget, profile, floor)
    POST /ui/traces/{trace_id}/replay  replays the call with those overrides (as of its own
                                instant, docs/time-travel.md) and shows the diff

Memory content, queries and subject ids are untrusted text: every value goes through Jinja2's
autoescaping and the pages run no script at all (the Content-Security-Policy forbids it), so a
fact written as `<script>` renders as text. The key travels only in the POST body and in the
cookie, never in a URL, and the cookie is scoped to /ui so the JSON API never receives it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any, Final
from urllib.parse import quote
from uuid import UUID

from jinja2 import Environment, PackageLoader, StrictUndefined
from litestar import Controller, MediaType, Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.params import Parameter
from litestar.response import Redirect

from service.api import auth
from service.api.deps import ConnDep, lease_of, provide_embedder, provide_settings
from service.api.memory import query_scope_id
from service.context import replay as time_travel
from service.db.replica import READS, provide_reads
from service.errors import NotFound, Unauthorized
from service.repository import traces as repo
from service.settings import ContextProfile
from service.structs import ReplayRequest

COOKIE_NAME: Final = "haki_ui_key"
COOKIE_PATH: Final = "/ui"
# A working day: long enough not to nag, short enough that a forgotten browser forgets the key.
COOKIE_MAX_AGE_SECONDS: Final = 8 * 3600
RECENT_CALLS_DEFAULT: Final = 50
RECENT_CALLS_MAX: Final = 500
# An API key is `hk_` and 43 characters: a much longer entry is refused before it is hashed.
MAX_KEY_ENTRY_CHARS: Final = 200

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # Pages show tenant memory: no shared or browser cache may keep them.
    "Cache-Control": "no-store",
}

SECTIONS: Final = (
    ("included", "Served", "Included in the packet, in pack order."),
    (
        "excluded",
        "Excluded",
        "Candidates ranked out: over_budget (did not fit in what was left), below_relevance_floor "
        "(farther from the query than HAKI_RECALL_MAX_DISTANCE) or already_served (its event or "
        "its text was already in the packet).",
    ),
    (
        "blocked",
        "Blocked",
        "Hidden by a hard rule before any scoring: conflict_open (in an open conflict set) or "
        "volatility_expired (a stale volatile fact).",
    ),
)


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _num(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.3f}"


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("service.api", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["num"] = _num
    env.filters["urlencode"] = lambda s: quote(str(s), safe="")
    return env


_ENV: Final = _environment()
_CSS: Final = (resources.files("service.api") / "templates" / "haki.css").read_bytes()


def _trace_not_found(project_id: str) -> Response[str]:
    return _page(
        "error.html",
        status_code=404,
        project_id=project_id,
        title="Trace not found",
        message="No context call with this id in the key's project.",
    )


def _page(template: str, status_code: int = 200, **context: Any) -> Response[str]:
    context.setdefault("project_id", None)
    html = _ENV.get_template(template).render(**context)
    return Response(html, status_code=status_code, media_type=MediaType.HTML, headers=SECURITY_HEADERS)


def _to_login() -> Redirect:
    # The cookie is dropped too: one that no longer authenticates (revoked key) is useless.
    return Redirect(
        "/ui/login",
        status_code=303,
        headers=SECURITY_HEADERS,
        cookies=[Cookie(key=COOKIE_NAME, value="", path=COOKIE_PATH, max_age=0, expires=0)],
    )


async def _principal(request: Request[Any, Any, Any], conn: ConnDep) -> auth.Principal | None:
    token = request.cookies.get(COOKIE_NAME)
    if not token:
        return None
    try:
        return await auth.authenticate(conn, f"Bearer {token}")
    except Unauthorized:
        return None


class TraceInspector(Controller):
    path = "/ui"
    include_in_schema = False

    @get("/", media_type=MediaType.HTML)
    async def index(self) -> Redirect:
        return Redirect("/ui/traces", status_code=303)

    @get("/assets/haki.css", media_type="text/css")
    async def stylesheet(self) -> Response[bytes]:
        return Response(
            _CSS,
            media_type="text/css; charset=utf-8",
            headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    @get("/login", media_type=MediaType.HTML)
    async def login_form(self) -> Response[str]:
        return _page("login.html", error=None)

    @post("/login", media_type=MediaType.HTML, status_code=303)
    async def login(self, request: Request[Any, Any, Any], conn: ConnDep) -> Response[Any]:
        form = await request.form()
        raw = form.get("key")
        key = raw.strip() if isinstance(raw, str) else ""
        if not key or len(key) > MAX_KEY_ENTRY_CHARS or "\x00" in key:
            return _page("login.html", status_code=400, error="Enter an API key (hk_...).")
        try:
            await auth.authenticate(conn, f"Bearer {key}")
        except Unauthorized:
            return _page("login.html", status_code=401, error="Unknown or revoked API key.")
        cookie = Cookie(
            key=COOKIE_NAME,
            value=key,
            path=COOKIE_PATH,
            max_age=COOKIE_MAX_AGE_SECONDS,
            httponly=True,
            samesite="strict",
            # Behind TLS the cookie never travels in clear; plain http stays usable on localhost.
            secure=request.url.scheme == "https",
        )
        return Redirect("/ui/traces", status_code=303, headers=SECURITY_HEADERS, cookies=[cookie])

    @post("/logout", status_code=303)
    async def logout(self) -> Redirect:
        return _to_login()

    @get("/traces", media_type=MediaType.HTML, opt={READS: True})
    async def recent_calls(
        self,
        request: Request[Any, Any, Any],
        conn: ConnDep,
        state: State,
        subject_id: Annotated[str | None, Parameter(query="subject_id")] = None,
        limit: Annotated[int, Parameter(query="limit", ge=1, le=RECENT_CALLS_MAX)] = RECENT_CALLS_DEFAULT,
    ) -> Response[Any]:
        principal = await _principal(request, conn)
        if principal is None:
            provide_reads(request, state).missing("api key")
            return _to_login()
        # The form sends `subject_id=` for all subjects: only a non-empty one must be a scope id.
        subject = query_scope_id("subject_id", subject_id) if subject_id else None
        calls = await repo.recent_context_calls(conn, principal.project_id, subject, limit)
        return _page("traces.html", project_id=principal.project_id, subject_id=subject, calls=calls)

    @get("/traces/{trace_id:uuid}", media_type=MediaType.HTML, opt={READS: True})
    async def trace(
        self, request: Request[Any, Any, Any], conn: ConnDep, state: State, trace_id: UUID
    ) -> Response[Any]:
        reads = provide_reads(request, state)
        principal = await _principal(request, conn)
        if principal is None:
            reads.missing("api key")  # created a moment ago: the primary knows it
            return _to_login()
        call = await repo.get_context_call(conn, principal.project_id, trace_id)
        if call is None:
            reads.missing("trace")  # written a moment ago: the primary has it
            return _trace_not_found(principal.project_id)
        items = await repo.trace_items(conn, principal.project_id, trace_id)
        included = [d for d in items if d["decision"] == "included"]
        budget = int(call["budget_tokens"])
        used = int(call["used_tokens"])
        return _page(
            "trace.html",
            project_id=principal.project_id,
            call=call,
            sections=[
                {
                    "decision": decision,
                    "title": title,
                    "hint": hint,
                    "rows": [d for d in items if d["decision"] == decision],
                }
                for decision, title, hint in SECTIONS
            ],
            percent=round(100 * used / budget) if budget > 0 else 0,
            fact_tokens=sum(d["tokens"] for d in included if d["item_type"] == "fact"),
            episode_tokens=sum(d["tokens"] for d in included if d["item_type"] == "episode"),
        )

    @post("/traces/{trace_id:uuid}/replay", media_type=MediaType.HTML, status_code=200)
    async def replay(
        self,
        request: Request[Any, Any, Any],
        conn: ConnDep,
        state: State,
        trace_id: UUID,
    ) -> Response[Any]:
        """The "replay with…" form of a trace page: POST /v1/inspect/{trace_id}/replay with the
        budget, profile and floor typed in (blank: the original's), and the diff as a page."""
        principal = await _principal(request, conn)
        if principal is None:
            return _to_login()
        overrides = _replay_overrides(await request.form())
        if isinstance(overrides, str):
            return _page(
                "error.html",
                status_code=400,
                project_id=principal.project_id,
                title="Replay",
                message=overrides,
            )
        lease = lease_of(request, conn)
        try:
            result = await time_travel.replay(
                lease, provide_embedder(state), provide_settings(state), principal, trace_id, overrides
            )
        except NotFound:
            return _trace_not_found(principal.project_id)
        conn = lease.conn  # another connection if the replay's query waited on the embedder
        origin = await repo.get_context_call(conn, principal.project_id, trace_id)
        items = await repo.trace_items(conn, principal.project_id, result.packet.trace_id)
        items += await repo.trace_items(conn, principal.project_id, trace_id)
        contents = {str(d["item_id"]): d["content"] for d in items}
        return _page(
            "replay.html",
            project_id=principal.project_id,
            origin=origin,
            result=result,
            contents=contents,
            sections=[
                ("added", "Added", "Served by the replay, not by the original call.", result.diff.added),
                (
                    "removed",
                    "Removed",
                    "Served by the original call, not by the replay.",
                    result.diff.removed,
                ),
                (
                    "moved",
                    "Moved",
                    "Decided by both, served by both or by neither, with another rank or reason.",
                    result.diff.moved,
                ),
            ],
        )


PROFILES: Final[tuple[ContextProfile, ...]] = ("unified", "facts_first")


def _replay_overrides(form: Any) -> ReplayRequest | str:
    """The form's fields as a ReplayRequest (a blank field: the original's value), or why not."""

    def text(name: str) -> str:
        raw = form.get(name)
        return raw.strip() if isinstance(raw, str) else ""

    budget, profile, floor = text("budget_tokens"), text("profile"), text("recall_max_distance")
    try:
        budget_tokens = int(budget) if budget else None
        recall_max_distance = float(floor) if floor else None
    except ValueError:
        return "The budget must be a whole number and the floor a number."
    if budget_tokens is not None and not 1 <= budget_tokens <= 2**63 - 1:
        return "The budget must be a positive number of tokens."
    if recall_max_distance is not None and not 0.0 <= recall_max_distance <= 2.0:
        return "The floor is a cosine distance between 0 (off) and 2."
    if profile and profile not in PROFILES:
        return "The profile is unified or facts_first."
    return ReplayRequest(
        budget_tokens=budget_tokens,
        profile="unified" if profile == "unified" else "facts_first" if profile else None,
        recall_max_distance=recall_max_distance,
    )
