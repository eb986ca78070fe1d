"""The trace inspector and memory browser: server-rendered HTML pages under /ui, for the people
behind an agent rather than for the agent.

    GET  /ui/login                  form asking for a project API key
    POST /ui/login                  checks the key, opens a server-side session (ui_sessions)
    POST /ui/logout                 ends the session
    GET  /ui/subjects?q=&cursor=    the project's subjects: counts, last activity; searchable, paged
    GET  /ui/subject?subject_id=    one subject: facts, events, open conflicts, recent calls
    GET  /ui/facts/{fact_id}        one fact, with the retract and supersede forms
    GET  /ui/conflicts/{id}         one conflict set, its members side by side, the resolve form
    POST /ui/facts/{fact_id}/retract, /ui/facts/{fact_id}/supersede,
         /ui/conflicts/{id}/resolve, /ui/subject/erase?subject_id=
                                    the actions: without `confirm=yes` a confirm page; with it
                                    the JSON route's own service call, logged (logger haki.ui)
    GET  /ui/traces?subject_id=     the latest context calls of the key's project
    GET  /ui/traces/{trace_id}      one call: query, budget bar, every decision (a fact blocked by
                                    a conflict links to its set), warnings, a "replay with…" form
    POST /ui/traces/{trace_id}/replay  replays the call with those overrides (as of its own
                                    instant, docs/time-travel.md) and shows the diff

Memory content, queries and subject ids are untrusted text: every value goes through Jinja2's
autoescaping and the pages run no script at all (the Content-Security-Policy forbids it), so a
fact written as `<script>` renders as text. The key travels only in the login form's POST body:
the cookie holds the project and a random session secret, of which the server keeps only the
SHA-256, and it is scoped to /ui so the JSON API never receives it. Every POST but the login's
carries the session's CSRF token, and a POST whose Origin (or Referer) names another site is
refused before anything else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import secrets
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Annotated, Any, Final, TypeVar
from urllib.parse import quote, urlsplit
from uuid import UUID

import msgspec
from jinja2 import Environment, PackageLoader, StrictUndefined
from litestar import Controller, MediaType, Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.params import Parameter
from litestar.response import Redirect

from service.api import auth
from service.api.deps import ConnDep, lease_of, provide_deps, provide_embedder, provide_settings
from service.api.lifecycle import delete_subject
from service.api.memory import post_facts, post_resolve, query_scope_id, update_fact
from service.context import replay as time_travel
from service.db.replica import READS, Reads, provide_reads
from service.errors import ErrorBody, HakiError, InvalidInput, NotFound, Unauthorized, handle_exception
from service.memory import cursors, erasure
from service.memory import writes as memory
from service.repository import conflicts as conflicts_repo
from service.repository import traces as repo
from service.repository import ui as ui_repo
from service.scope_id import scope_id_problem
from service.settings import ContextProfile
from service.structs import (
    ConflictSet,
    Fact,
    FactIn,
    PatchFactRequest,
    ReplayRequest,
    ResolveConflictRequest,
    UiSession,
    UiSubjectPage,
    WriteFactsRequest,
)
from service.webhooks import subscriptions

log = logging.getLogger("haki.ui")

COOKIE_NAME: Final = "haki_ui_session"
COOKIE_PATH: Final = "/ui"
CSRF_FIELD: Final = "csrf_token"
# A working day: long enough not to nag, short enough that a forgotten browser is logged out.
SESSION_SECONDS: Final = 8 * 3600
RECENT_CALLS_DEFAULT: Final = 50
RECENT_CALLS_MAX: Final = 500
SUBJECTS_PAGE: Final = 50
# The latest deliveries the webhooks page shows for each webhook.
WEBHOOK_DELIVERIES: Final = 10
SUBJECT_FACTS_PAGE: Final = 100
SUBJECT_EVENTS_PAGE: Final = 50
SUBJECT_CALLS: Final = 20
# An API key is `hk_` and 43 characters: a much longer entry is refused before it is hashed.
MAX_KEY_ENTRY_CHARS: Final = 200
# The cookie: base64url of a project id (at most 200 characters, 4 bytes each) and a secret.
MAX_COOKIE_CHARS: Final = 1200
MAX_SEARCH_CHARS: Final = 200

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the
    # pages' own form posts, and the cross-site check below could not tell them apart.
    "Referrer-Policy": "same-origin",
    # Pages show tenant memory: no shared or browser cache may keep them.
    "Cache-Control": "no-store",
}

SECTIONS: Final = (
    ("included", "Served", "Included in the packet, in pack order."),
    (
        "excluded",
        "Excluded",
        "Candidates ranked out: over_budget (did not fit in what was left), below_relevance_floor "
        "(farther from the query than HAKI_RECALL_MAX_DISTANCE), already_served (its event or "
        "its text was already in the packet) or replaced_by_stand_in (a cheaper fact of the "
        "episode's turn was packed at its rank).",
    ),
    (
        "blocked",
        "Blocked",
        "Hidden by a hard rule before any scoring: conflict_open (in an open conflict set: follow "
        "the link to resolve it) or volatility_expired (a stale volatile fact).",
    ),
)


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    utc = value.astimezone(UTC)
    # strftime's %Y does not pad a year before 1000 (glibc): "1-01-01" reads as a typo.
    return f"{utc.year:04d}-{utc:%m-%d %H:%M:%S}"


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
    # A tenant's value in a <title> (no CSS there): a bidi control in it cannot reorder the rest.
    env.filters["isolate"] = lambda s: f"\u2068{s}\u2069"
    return env


_ENV: Final = _environment()
_CSS: Final = (resources.files("service.api") / "templates" / "haki.css").read_bytes()


# --- sessions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Visitor:
    """Whoever holds a live session: the key's principal and the session's CSRF token."""

    principal: auth.Principal
    session: UiSession
    session_hash: bytes

    @property
    def csrf(self) -> str:
        return self.session.csrf_token


def _cookie_value(project_id: str, secret: str) -> str:
    encoded = base64.urlsafe_b64encode(project_id.encode()).rstrip(b"=").decode()
    return f"{encoded}.{secret}"


def _parse_cookie(value: str | None) -> tuple[str, bytes] | None:
    """(project id, SHA-256 of the secret) of a session cookie, None for anything else."""
    if not value or len(value) > MAX_COOKIE_CHARS or value.count(".") != 1:
        return None
    encoded, secret = value.split(".")
    try:
        project_id = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, ValueError):
        return None
    if not secret or scope_id_problem(project_id) is not None:
        return None
    return project_id, hashlib.sha256(secret.encode()).digest()


async def _visitor(request: Request[Any, Any, Any], conn: ConnDep) -> Visitor | None:
    parsed = _parse_cookie(request.cookies.get(COOKIE_NAME))
    if parsed is None:
        return None
    project_id, session_hash = parsed
    session = await ui_repo.get_session(conn, project_id, session_hash)
    if session is None:
        return None
    principal = auth.Principal(project_id=project_id, key_id=session.key_id)
    return Visitor(principal=principal, session=session, session_hash=session_hash)


async def _reader(
    request: Request[Any, Any, Any], conn: ConnDep, state: State
) -> tuple[Reads, Visitor | None]:
    """A page read on the standby and its visitor. No session there: one opened a moment ago is
    on the primary; a session of the project this process ended since the standby's replay (a
    logout) is not over there yet: either way the request runs again on the primary."""
    reads = provide_reads(request, state)
    visitor = await _visitor(request, conn)
    if visitor is None:
        reads.missing("session")
    else:
        reads.fresh_session(visitor.principal.project_id)
    return reads, visitor


def _scheme(request: Request[Any, Any, Any]) -> str:
    forwarded = request.headers.get("x-forwarded-proto")
    return forwarded.split(",")[0].strip().lower() if forwarded else request.url.scheme


def _foreign_origin(request: Request[Any, Any, Any]) -> str | None:
    """The other site a POST comes from (its Origin, else its Referer), None when it is this one.
    Compared by host, as the browser sent it, with the Host (or X-Forwarded-Host) it reached."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if source is None:
        return None  # not a browser's cross-site form: the CSRF token still has to match
    hosts = {request.headers.get("host"), request.headers.get("x-forwarded-host")} - {None}
    netloc = urlsplit(source).netloc if source != "null" else ""
    return None if netloc and netloc in hosts else source[:200]


def _expired_cookie() -> Cookie:
    return Cookie(key=COOKIE_NAME, value="", path=COOKIE_PATH, max_age=0, expires=0, httponly=True)


def _to_login() -> Redirect:
    # The cookie is dropped too: one that no longer opens a session (expired, key revoked) is useless.
    return Redirect("/ui/login", status_code=303, headers=SECURITY_HEADERS, cookies=[_expired_cookie()])


def _page(template: str, status_code: int = 200, **context: Any) -> Response[str]:
    context.setdefault("project_id", None)
    context.setdefault("csrf", None)
    html = _ENV.get_template(template).render(**context)
    return Response(html, status_code=status_code, media_type=MediaType.HTML, headers=SECURITY_HEADERS)


def _view(visitor: Visitor, template: str, status_code: int = 200, **context: Any) -> Response[str]:
    """A page of a logged-in visitor: the header names the project and logs out with the token."""
    return _page(template, status_code, project_id=visitor.principal.project_id, csrf=visitor.csrf, **context)


def _error(visitor: Visitor | None, status_code: int, title: str, message: str) -> Response[str]:
    if visitor is None:
        return _page("error.html", status_code=status_code, title=title, message=message)
    return _view(visitor, "error.html", status_code=status_code, title=title, message=message)


def _not_found(visitor: Visitor, what: str) -> Response[str]:
    return _error(
        visitor, 404, f"{what.capitalize()} not found", f"No {what} with this id in the key's project."
    )


def _subject_not_found(visitor: Visitor) -> Response[str]:
    return _error(visitor, 404, "Subject not found", "No memory of this subject in the key's project.")


def _trace_not_found(visitor: Visitor) -> Response[str]:
    return _error(visitor, 404, "Trace not found", "No context call with this id in the key's project.")


async def _form(request: Request[Any, Any, Any]) -> Any:
    return await request.form()


def _text(form: Any, name: str) -> str:
    raw = form.get(name)
    return raw.strip() if isinstance(raw, str) else ""


def _multiline(form: Any, name: str) -> str:
    """A textarea's text with its line breaks as LF, as an API client writes them: a browser
    submits every line break of a form as CRLF (HTML form submission)."""
    return _text(form, name).replace("\r\n", "\n").replace("\r", "\n")


def _id(form: Any, name: str) -> str:
    """An id as the page sent it: never stripped, or `victim ` would erase `victim`."""
    raw = form.get(name)
    return raw if isinstance(raw, str) else ""


class _Answered(Exception):
    """A page that answers before the handler's end (the login page, a refusal, a 404, an
    action's error page): raised by the helpers below so that each handler reads straight
    through, and sent as is by TraceInspector's exception handler."""

    def __init__(self, response: Response[Any]) -> None:
        super().__init__(response.status_code)
        self.response = response


def _answered(_: Request[Any, Any, Any], exc: _Answered) -> Response[Any]:
    return exc.response


def refused_page(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The app's exception handler under /ui (is_ui_path): a request refused by the API's rules (a
    bad cursor or id, an unknown page, a wrong method) gets the API's status and message on an
    error page with the pages' headers, not its JSON body. A 5xx keeps its JSON body (and
    Retry-After)."""
    answer = handle_exception(request, exc)
    status, body = answer.status_code or 500, answer.content
    if status >= 500 or not isinstance(body, ErrorBody):
        answer.headers.update(SECURITY_HEADERS)
        return answer
    page = _error(None, status, "Refused", body.message)
    # A 405's Allow (RFC 9110), a 429's Retry-After: what the JSON answer said beside its body.
    page.headers.update({k: v for k, v in answer.headers.items() if k.lower() in ("allow", "retry-after")})
    return page


def is_ui_path(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


@contextmanager
def _named(field: str, as_: str) -> Iterator[None]:
    """Names a query parameter as the page names it (the API calls both cursors `cursor`)."""
    try:
        yield
    except InvalidInput as exc:
        if exc.details is None or exc.details.get("field") != field:
            raise
        raise InvalidInput(as_, exc.message.removeprefix(f"{field}: ")) from exc


async def _session(request: Request[Any, Any, Any], conn: ConnDep) -> Visitor:
    """The visitor of a page that needs a session; without one, the login page answers."""
    visitor = await _visitor(request, conn)
    if visitor is None:
        raise _Answered(_to_login())
    return visitor


async def _posted(request: Request[Any, Any, Any], conn: ConnDep) -> tuple[Visitor, Any]:
    """A state-changing POST of a session: its origin, its session, then its CSRF token; each
    failure answers before the handler does anything."""
    foreign = _foreign_origin(request)
    if foreign is not None:
        log.warning("ui refused a cross-site POST to %s from %r", request.url.path, foreign)
        raise _Answered(_error(None, 403, "Refused", "This form was sent from another site."))
    visitor = await _session(request, conn)
    form = await _form(request)
    if not hmac.compare_digest(_text(form, CSRF_FIELD).encode(), visitor.csrf.encode()):
        log.warning("ui refused a POST to %s: its form lacks the CSRF value of this login", request.url.path)
        stale = "This form is stale or was not sent by this site: reload the page."
        raise _Answered(_error(visitor, 403, "Refused", stale))
    return visitor, form


async def _fact(conn: ConnDep, visitor: Visitor, fact_id: UUID) -> Fact:
    """A fact of the session's project; 404 when it has no such fact."""
    try:
        return await memory.get_fact(conn, visitor.principal, fact_id)
    except NotFound:
        raise _Answered(_not_found(visitor, "fact")) from None


async def _posted_fact(
    request: Request[Any, Any, Any], conn: ConnDep, fact_id: UUID
) -> tuple[Visitor, Any, Fact]:
    """A state-changing POST on one fact (_posted), and the fact."""
    visitor, form = await _posted(request, conn)
    return visitor, form, await _fact(conn, visitor, fact_id)


T = TypeVar("T")


async def _act(visitor: Visitor, action: str, title: str, work: Awaitable[T], **fields: Any) -> T:
    """An action's service call (the JSON route's own): refused, it is audited with the refusal's
    code and answered with the action's error page."""
    try:
        return await work
    except HakiError as exc:
        _audit(visitor, action, **fields, outcome=exc.code)
        page = _error(visitor, exc.status_code, title, exc.message)
        page.headers.update(exc.headers)  # a 429's wait, as the JSON route sends it
        raise _Answered(page) from exc


def _audit(visitor: Visitor, action: str, **fields: Any) -> None:
    """One structured line per action: who (project, key id), what, on which object, the outcome."""
    record = {
        "event": "ui_action",
        "action": action,
        "project_id": visitor.principal.project_id,
        "key_id": str(visitor.principal.key_id),
        **{k: str(v) if isinstance(v, UUID) else v for k, v in fields.items()},
    }
    log.info("ui action %s", msgspec.json.encode(record).decode(), extra={"haki_ui": record})


def _confirmed(form: Any) -> bool:
    return _text(form, "confirm") == "yes"


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


# What an action's redirect says on the page it lands on (`?done=`).
DONE: Final = {
    "resolved": "Resolved: the kept facts stay active, the others are superseded.",
    "retracted": "Retracted: this fact is no longer served.",
    "superseded": "Saved: this new fact replaces the one it supersedes.",
}
DoneQuery = Annotated[str | None, Parameter(query="done", max_length=20)]


class TraceInspector(Controller):
    path = "/ui"
    include_in_schema = False
    # Every other exception under /ui reaches refused_page through the app's handler.
    exception_handlers = {_Answered: _answered}

    @get("/", media_type=MediaType.HTML)
    async def index(self) -> Redirect:
        return Redirect("/ui/subjects", status_code=303, headers=SECURITY_HEADERS)

    @get("/assets/haki.css", media_type="text/css")
    async def stylesheet(self) -> Response[bytes]:
        return Response(
            _CSS,
            media_type="text/css; charset=utf-8",
            headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    # --- login and logout ------------------------------------------------------------------

    @get("/login", media_type=MediaType.HTML)
    async def login_form(self) -> Response[str]:
        return _page("login.html", error=None)

    @post("/login", media_type=MediaType.HTML, status_code=303)
    async def login(self, request: Request[Any, Any, Any], conn: ConnDep) -> Response[Any]:
        if (foreign := _foreign_origin(request)) is not None:
            log.warning("ui refused a cross-site login from %r", foreign)
            return _error(None, 403, "Refused", "This form was sent from another site.")
        form = await _form(request)
        key = _text(form, "key")
        if not key or len(key) > MAX_KEY_ENTRY_CHARS or "\x00" in key:
            return _page("login.html", status_code=400, error="Enter an API key (hk_...).")
        try:
            principal = await auth.authenticate(conn, f"Bearer {key}")
        except Unauthorized:
            return _page("login.html", status_code=401, error=auth.UNKNOWN_KEY)
        secret = secrets.token_urlsafe(32)
        expires_at = datetime.now(UTC) + timedelta(seconds=SESSION_SECONDS)
        await ui_repo.create_session(
            conn,
            principal.project_id,
            hashlib.sha256(secret.encode()).digest(),
            principal.key_id,
            secrets.token_urlsafe(32),
            expires_at,
        )
        cookie = Cookie(
            key=COOKIE_NAME,
            value=_cookie_value(principal.project_id, secret),
            path=COOKIE_PATH,
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            # Behind TLS the cookie never travels in clear; plain http stays usable on localhost.
            secure=_scheme(request) == "https",
        )
        return Redirect("/ui/subjects", status_code=303, headers=SECURITY_HEADERS, cookies=[cookie])

    @post("/logout", status_code=303)
    async def logout(self, request: Request[Any, Any, Any], conn: ConnDep, state: State) -> Response[Any]:
        if _parse_cookie(request.cookies.get(COOKIE_NAME)) is None:
            return _to_login()
        visitor, _ = await _posted(request, conn)
        await ui_repo.delete_session(conn, visitor.principal.project_id, visitor.session_hash)
        await provide_reads(request, state).note_session_end(conn, visitor.principal.project_id)
        return _to_login()

    # --- the memory browser ----------------------------------------------------------------

    @get("/subjects", media_type=MediaType.HTML)
    async def subjects(
        self,
        request: Request[Any, Any, Any],
        conn: ConnDep,
        q: Annotated[str | None, Parameter(query="q", max_length=MAX_SEARCH_CHARS)] = None,
        cursor: Annotated[
            str | None, Parameter(query="cursor", max_length=cursors.SUBJECT_CURSOR_MAX_CHARS)
        ] = None,
        limit: Annotated[int, Parameter(query="limit", ge=1, le=RECENT_CALLS_MAX)] = SUBJECTS_PAGE,
    ) -> Response[Any]:
        visitor = await _session(request, conn)
        project_id = visitor.principal.project_id
        search = q.strip() if q and q.strip() and "\x00" not in q else None
        listing = (project_id, search)
        after = cursors.decode_subject_cursor(listing, cursor) if cursor else None
        rows = await ui_repo.list_subjects(conn, project_id, search, after, limit + 1)
        page = UiSubjectPage(
            subjects=rows[:limit],
            next_cursor=cursors.encode_subject_cursor(listing, rows[limit - 1].subject_id)
            if len(rows) > limit
            else None,
        )
        return _view(visitor, "subjects.html", page=page, search=search, cursor=cursor, limit=limit)

    @get("/webhooks", media_type=MediaType.HTML)
    async def webhooks(self, request: Request[Any, Any, Any], conn: ConnDep) -> Response[Any]:
        """The project's webhooks with their deliveries by status, and each one's latest
        deliveries: what GET /v1/webhooks and its deliveries route answer (docs/webhooks.md)."""
        visitor = await _session(request, conn)
        listed = await subscriptions.list_webhooks(conn, visitor.principal, visitor.principal.project_id)
        latest = {
            w.webhook_id: (
                await subscriptions.list_deliveries(
                    conn, visitor.principal, w.webhook_id, None, WEBHOOK_DELIVERIES
                )
            ).deliveries
            for w in listed.webhooks
        }
        return _view(visitor, "webhooks.html", webhooks=listed.webhooks, latest=latest)

    @get("/subject", media_type=MediaType.HTML)
    async def subject(
        self,
        request: Request[Any, Any, Any],
        conn: ConnDep,
        subject_id: Annotated[str, Parameter(query="subject_id")],
        facts_cursor: Annotated[str | None, Parameter(query="facts_cursor", max_length=64)] = None,
        events_cursor: Annotated[str | None, Parameter(query="events_cursor", max_length=64)] = None,
    ) -> Response[Any]:
        visitor = await _session(request, conn)
        subject = query_scope_id("subject_id", subject_id)
        principal, project_id = visitor.principal, visitor.principal.project_id
        summary = await ui_repo.get_subject(conn, project_id, subject)
        if summary is None:
            return _subject_not_found(visitor)
        with _named("cursor", "facts_cursor"):
            facts = await memory.list_facts(
                conn, principal, project_id, subject, None, SUBJECT_FACTS_PAGE, facts_cursor
            )
        with _named("cursor", "events_cursor"):
            events = await erasure.list_events(
                conn, principal, project_id, subject, SUBJECT_EVENTS_PAGE, events_cursor
            )
        conflicts = await memory.list_conflicts(conn, principal, project_id, subject, "open")
        calls = await repo.recent_context_calls(conn, project_id, subject, SUBJECT_CALLS)
        return _view(
            visitor,
            "subject.html",
            subject_id=subject,
            facts=facts,
            events=events,
            conflicts=conflicts.conflicts,
            calls=calls,
            summary=summary,
            erase_action=_erase_action(subject),
        )

    @get("/facts/{fact_id:uuid}", media_type=MediaType.HTML)
    async def fact(
        self, request: Request[Any, Any, Any], conn: ConnDep, fact_id: UUID, done: DoneQuery = None
    ) -> Response[Any]:
        visitor = await _session(request, conn)
        fact = await _fact(conn, visitor, fact_id)
        source = None
        if fact.source_event_id is not None:
            try:
                source = await erasure.get_event(conn, visitor.principal, fact.source_event_id)
            except NotFound:
                source = None
        replaced_by = await memory.replaced_by(conn, visitor.principal, fact)
        return _view(
            visitor, "fact.html", fact=fact, source=source, replaced_by=replaced_by, done=DONE.get(done or "")
        )

    @get("/conflicts/{conflict_set_id:uuid}", media_type=MediaType.HTML)
    async def conflict(
        self, request: Request[Any, Any, Any], conn: ConnDep, conflict_set_id: UUID, done: DoneQuery = None
    ) -> Response[Any]:
        visitor = await _session(request, conn)
        conflict, members = await _conflict_with_facts(conn, visitor, conflict_set_id)
        return _view(visitor, "conflict.html", conflict=conflict, members=members, done=DONE.get(done or ""))

    # --- the actions: a confirm page, then the JSON route's own service call ----------------

    @post("/conflicts/{conflict_set_id:uuid}/resolve", media_type=MediaType.HTML, status_code=200)
    async def resolve(
        self, request: Request[Any, Any, Any], conn: ConnDep, state: State, conflict_set_id: UUID
    ) -> Response[Any]:
        visitor, form = await _posted(request, conn)
        conflict, members = await _conflict_with_facts(conn, visitor, conflict_set_id)
        raw_keep = [v for v in form.getall("keep", []) if isinstance(v, str)]
        keep = [_uuid(v) for v in raw_keep]
        if not keep or None in keep:
            return _error(visitor, 400, "Resolve", "keep: choose at least one member to keep.")
        kept = [k for k in keep if k is not None]
        status_of = {m.fact_id: m.status for m in members}
        for i, k in enumerate(kept):
            # Refused before the confirm page, which would otherwise promise it "stays active".
            if status_of.get(k, "active") != "active":
                message = f"keep[{i}]: is {status_of[k]}: only an active member can be kept"
                return _error(visitor, 422, "Resolve", message)
        if not _confirmed(form):
            return _view(
                visitor,
                "confirm.html",
                action=f"/ui/conflicts/{conflict_set_id}/resolve",
                title="Resolve this conflict?",
                fields=[("keep", str(k)) for k in kept],
                conflict=conflict,
                members=members,
                kept=set(kept),
                kind="resolve",
                back=f"/ui/conflicts/{conflict_set_id}",
            )
        deps = provide_deps(request, conn, visitor.principal, state)
        resolved = await _act(
            visitor,
            "resolve_conflict",
            "Resolve",
            post_resolve(deps, conflict_set_id, ResolveConflictRequest(keep=kept)),
            conflict_set_id=conflict_set_id,
        )
        _audit(
            visitor,
            "resolve_conflict",
            subject_id=resolved.subject_id,
            conflict_set_id=conflict_set_id,
            kept=[str(k) for k in kept],
            superseded=[str(m.fact_id) for m in resolved.members if m.fact_id not in kept],
            outcome="resolved",
        )
        return Redirect(
            f"/ui/conflicts/{conflict_set_id}?done=resolved", status_code=303, headers=SECURITY_HEADERS
        )

    @post("/facts/{fact_id:uuid}/retract", media_type=MediaType.HTML, status_code=200)
    async def retract(
        self, request: Request[Any, Any, Any], conn: ConnDep, state: State, fact_id: UUID
    ) -> Response[Any]:
        visitor, form, fact = await _posted_fact(request, conn, fact_id)
        if not _confirmed(form):
            return _view(
                visitor,
                "confirm.html",
                action=f"/ui/facts/{fact_id}/retract",
                title="Retract this fact?",
                fields=[],
                fact=fact,
                kind="retract",
                back=f"/ui/facts/{fact_id}",
            )
        deps = provide_deps(request, conn, visitor.principal, state)
        # What PATCH /v1/facts/{fact_id} runs.
        retract = update_fact(deps, fact_id, PatchFactRequest(status="retracted"))
        patched = await _act(visitor, "retract_fact", "Retract", retract, fact_id=fact_id)
        _audit(
            visitor, "retract_fact", subject_id=patched.subject_id, fact_id=fact_id, outcome=patched.status
        )
        return Redirect(f"/ui/facts/{fact_id}?done=retracted", status_code=303, headers=SECURITY_HEADERS)

    @post("/facts/{fact_id:uuid}/supersede", media_type=MediaType.HTML, status_code=200)
    async def supersede(
        self, request: Request[Any, Any, Any], conn: ConnDep, state: State, fact_id: UUID
    ) -> Response[Any]:
        visitor, form, fact = await _posted_fact(request, conn, fact_id)
        content = _multiline(form, "content")
        try:
            new_fact = msgspec.convert(
                {
                    "content": content,
                    "key": fact.key,
                    "volatility": fact.volatility,
                    "stale_after_seconds": fact.stale_after_seconds,
                    "supersedes": str(fact_id),
                },
                FactIn,
            )
        except msgspec.ValidationError as exc:
            return _error(visitor, 400, "Supersede", f"content: {_field_problem(exc)}")
        if not _confirmed(form):
            return _view(
                visitor,
                "confirm.html",
                action=f"/ui/facts/{fact_id}/supersede",
                title="Supersede this fact?",
                fields=[("content", content)],
                fact=fact,
                content=content,
                kind="supersede",
                back=f"/ui/facts/{fact_id}",
            )
        deps = provide_deps(request, conn, visitor.principal, state)
        request_body = WriteFactsRequest(
            project_id=visitor.principal.project_id, subject_id=fact.subject_id, facts=[new_fact]
        )
        # What POST /v1/facts runs, with `supersedes` naming this fact.
        outcome = await _act(
            visitor,
            "supersede_fact",
            "Supersede",
            post_facts(deps, request_body),
            subject_id=fact.subject_id,
            fact_id=fact_id,
        )
        (written,) = outcome.body.facts
        _audit(
            visitor,
            "supersede_fact",
            subject_id=fact.subject_id,
            fact_id=fact_id,
            new_fact_id=written.fact_id,
            outcome="superseded",
        )
        return Redirect(
            f"/ui/facts/{written.fact_id}?done=superseded", status_code=303, headers=SECURITY_HEADERS
        )

    @post("/subject/erase", media_type=MediaType.HTML, status_code=200)
    async def erase(
        self,
        request: Request[Any, Any, Any],
        conn: ConnDep,
        state: State,
        query_subject: Annotated[str | None, Parameter(query="subject_id")] = None,
    ) -> Response[Any]:
        """The subject id travels in the form's action, `?subject_id=`, percent-encoded: a browser
        rewrites each line break of a form's values as CRLF, so a hidden field could not carry an
        id holding one. A form field `subject_id` is taken when the query has none."""
        visitor, form = await _posted(request, conn)
        subject_id = query_subject if query_subject is not None else _id(form, "subject_id")
        if (problem := scope_id_problem(subject_id)) is not None:
            return _error(visitor, 400, "Erase", f"subject_id: {problem}")
        project_id = visitor.principal.project_id
        if not _confirmed(form):
            held = await ui_repo.get_subject(conn, project_id, subject_id)
            if held is None:
                return _subject_not_found(visitor)
            return _view(
                visitor,
                "confirm.html",
                action=_erase_action(subject_id),
                title="Erase this subject?",
                fields=[],
                held=held,
                kind="erase",
                back=f"/ui/subject?subject_id={quote(subject_id, safe='')}",
            )
        deps = provide_deps(request, conn, visitor.principal, state)
        # What DELETE /v1/subjects/{subject_id} runs.
        erased = await _act(
            visitor,
            "erase_subject",
            "Erase",
            delete_subject(deps, project_id, subject_id),
            subject_id=subject_id,
        )
        _audit(
            visitor,
            "erase_subject",
            subject_id=subject_id,
            outcome="erased",
            counts={
                f: getattr(erased, f) for f in erased.__struct_fields__ if isinstance(getattr(erased, f), int)
            },
        )
        return _view(visitor, "erased.html", erased=erased)

    # --- the trace inspector ---------------------------------------------------------------

    @get("/traces", media_type=MediaType.HTML, opt={READS: True})
    async def recent_calls(
        self,
        request: Request[Any, Any, Any],
        conn: ConnDep,
        state: State,
        subject_id: Annotated[str | None, Parameter(query="subject_id")] = None,
        limit: Annotated[int, Parameter(query="limit", ge=1, le=RECENT_CALLS_MAX)] = RECENT_CALLS_DEFAULT,
    ) -> Response[Any]:
        reads, visitor = await _reader(request, conn, state)
        if visitor is None:
            return _to_login()
        # The form sends `subject_id=` for all subjects: only a non-empty one must be a scope id.
        subject = query_scope_id("subject_id", subject_id) if subject_id else None
        reads.fresh(visitor.principal.project_id, subject, traces=True)  # a trace or erasure since
        calls = await repo.recent_context_calls(conn, visitor.principal.project_id, subject, limit)
        return _view(visitor, "traces.html", subject_id=subject, calls=calls)

    @get("/traces/{trace_id:uuid}", media_type=MediaType.HTML, opt={READS: True})
    async def trace(
        self, request: Request[Any, Any, Any], conn: ConnDep, state: State, trace_id: UUID
    ) -> Response[Any]:
        reads, visitor = await _reader(request, conn, state)
        if visitor is None:
            return _to_login()
        project_id = visitor.principal.project_id
        call = await repo.get_context_call(conn, project_id, trace_id)
        if call is None:
            reads.missing("trace")  # written a moment ago: the primary has it
            return _trace_not_found(visitor)
        # Its scope is known now: erased (or a fact it names erased) since the standby's replay?
        reads.fresh(project_id, call["subject_id"])
        items = await repo.trace_items(conn, project_id, trace_id)
        included = [d for d in items if d["decision"] == "included"]
        blocked_facts = [
            d["item_id"] for d in items if d["item_type"] == "fact" and d["reason_code"] == "conflict_open"
        ]
        budget = int(call["budget_tokens"])
        used = int(call["used_tokens"])
        return _view(
            visitor,
            "trace.html",
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
            conflict_of=await ui_repo.conflict_sets_of_facts(conn, project_id, blocked_facts),
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
        visitor, form = await _posted(request, conn)
        principal = visitor.principal
        overrides = _replay_overrides(form)
        if isinstance(overrides, str):
            return _error(visitor, 400, "Replay", overrides)
        lease = lease_of(request, conn)
        try:
            result = await time_travel.replay(
                lease,
                provide_embedder(state),
                provide_settings(state),
                principal,
                trace_id,
                overrides,
                noted=provide_reads(request, state).trace_noted,
            )
        except NotFound:
            return _trace_not_found(visitor)
        conn = lease.conn  # another connection if the replay's query waited on the embedder
        origin = await repo.get_context_call(conn, principal.project_id, trace_id)
        items = await repo.trace_items(conn, principal.project_id, result.packet.trace_id)
        items += await repo.trace_items(conn, principal.project_id, trace_id)
        contents = {str(d["item_id"]): d["content"] for d in items}
        return _view(
            visitor,
            "replay.html",
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


async def _conflict_with_facts(
    conn: ConnDep, visitor: Visitor, conflict_set_id: UUID
) -> tuple[ConflictSet, list[Fact]]:
    """A conflict set of the visitor's project and each member as a whole fact, side by side;
    404 when it has no such set."""
    principal = visitor.principal
    found = await conflicts_repo.list_conflicts(conn, principal.project_id, None, None, conflict_set_id)
    if not found:
        raise _Answered(_not_found(visitor, "conflict set"))
    conflict = found[0]
    members = [await memory.get_fact(conn, principal, m.fact_id) for m in conflict.members]
    return conflict, members


def _erase_action(subject_id: str) -> str:
    """The erase form's action: the subject id in the query, which no browser rewrites."""
    return f"/ui/subject/erase?subject_id={quote(subject_id, safe='')}"


def _field_problem(exc: msgspec.ValidationError) -> str:
    message = str(exc)
    return message.split(" - at ", 1)[0]


PROFILES: Final[tuple[ContextProfile, ...]] = ("unified", "facts_first")


def _replay_overrides(form: Any) -> ReplayRequest | str:
    """The form's fields as a ReplayRequest (a blank field: the original's value), or why not."""
    budget, profile, floor = (
        _text(form, "budget_tokens"),
        _text(form, "profile"),
        _text(form, "recall_max_distance"),
    )
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
