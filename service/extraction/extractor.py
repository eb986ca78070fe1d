"""POST /v1/extract: the chat model's proposals, checked, then written by the ordinary write path.

1. the scope's known facts (keyed first, then newest) and the messages go to the model, which
   answers in a JSON schema (`ANSWER_SCHEMA`);
2. the answer is decoded strictly (msgspec): anything else is a 502 `extractor_error`, a model
   that does not answer in HAKI_EXTRACT_TIMEOUT_SECONDS a 504 `extractor_timeout`; neither
   writes anything, and neither shows the client the model's URL or what its endpoint answered
   (the server logs them);
3. each proposal is checked against the messages, the known facts and the scope's active facts:
   refused ones are listed with their reason, the others (at most MAX_BATCH) become facts whose
   `source_event_id` is the event of their message;
4. one transaction writes the events (one per message) and then the facts through
   `memory.store_facts`, so supersedes, conflicts and source checks are those of POST /v1/facts.

The model runs before any transaction, like the embedder (service/memory/idempotency.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Annotated, Any, Final, Literal, TypeVar
from uuid import UUID

import httpx
import msgspec

from service.api.auth import Principal
from service.constants import EXTRACT_KNOWN_FACTS, EXTRACT_PROMPT_VERSION, MAX_BATCH, MAX_CONTENT_CHARS
from service.db import Lent
from service.embedding.embedder import Embedder, provider_retry_after
from service.errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    ExtractorFailed,
    ExtractorTimeout,
    InvalidInput,
    Unavailable,
)
from service.instants import check_storable
from service.memory import writes as memory
from service.redaction import endpoint_url, redacted_http_url
from service.repository import Conn
from service.repository import webhooks as webhooks_repo
from service.repository.extraction import (
    KnownFact,
    StaleFact,
    active_contents,
    count_erased_known,
    known_facts,
    lock_extraction_scope,
)
from service.repository.lifecycle import share_erasure_scope
from service.scope_id import scope_id_problem
from service.settings import Settings
from service.structs import (
    Content,
    EventIn,
    EventWriteResult,
    ExtractedFact,
    ExtractMessage,
    ExtractRequest,
    ExtractResponse,
    FactIn,
    RefusalReason,
    RefusedFact,
    WriteEventsRequest,
    WriteFactsRequest,
    WriteFactsResponse,
)

PROMPT_FILE = f"prompt_{EXTRACT_PROMPT_VERSION}.md"

log = logging.getLogger("haki.extraction")
S = TypeVar("S", bound=msgspec.Struct)


@cache
def system_prompt() -> str:
    return resources.files("service.extraction").joinpath(PROMPT_FILE).read_text(encoding="utf-8")


# --- the model's answer --------------------------------------------------------------------------


class ProposedFact(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    content: str
    source_message: int
    key: str | None = None
    supersedes: Annotated[int | None, msgspec.Meta(description="index of a known fact")] = None
    volatility: Literal["stable", "volatile"] = "stable"


class ModelAnswer(msgspec.Struct, forbid_unknown_fields=True):
    facts: list[ProposedFact]


# What response_format asks for (OpenAI's strict structured outputs: every property required,
# nullable ones typed as [T, "null"], no other properties).
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["facts"],
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["content", "key", "source_message", "supersedes", "volatility"],
                "properties": {
                    "content": {"type": "string"},
                    "key": {"type": ["string", "null"]},
                    "source_message": {"type": "integer"},
                    "supersedes": {"type": ["integer", "null"]},
                    "volatility": {"type": "string", "enum": ["stable", "volatile"]},
                },
            },
        }
    },
}


class _ChatMessage(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None


class _ChatChoice(msgspec.Struct):
    message: _ChatMessage


class _ChatCompletion(msgspec.Struct):
    choices: list[_ChatChoice]


def _configured(settings: Settings) -> tuple[str, str]:
    if not settings.extract_base_url:
        raise Unavailable(
            "Extraction is not configured: set HAKI_EXTRACT_BASE_URL (an OpenAI-compatible chat "
            "endpoint) and HAKI_EXTRACT_MODEL.",
            setting="HAKI_EXTRACT_BASE_URL",
        )
    if not settings.extract_model:
        raise Unavailable(
            "Extraction is not configured: set HAKI_EXTRACT_MODEL (the chat model to ask).",
            setting="HAKI_EXTRACT_MODEL",
        )
    return settings.extract_base_url.rstrip("/"), settings.extract_model


def user_prompt(messages: list[ExtractMessage], times: list[datetime], known: list[KnownFact]) -> str:
    payload = {
        "known_facts": [
            {"index": i, "key": f.key, "content": f.content, "volatility": f.volatility, "stale": f.stale}
            for i, f in enumerate(known)
        ],
        "messages": [
            {"index": i, "role": m.role, "occurred_at": t, "content": m.content}
            for i, (m, t) in enumerate(zip(messages, times, strict=True))
        ],
    }
    return msgspec.json.encode(payload).decode()


# A chat model's answers that mean "not now": rate limited, overloaded.
MODEL_BUSY_STATUSES: Final = frozenset({429, 503})


def _wait_for(response: httpx.Response) -> dict[str, int]:
    """A model rate-limited or overloaded (429, 503) passes again later: its 502 carries the
    model's own wait, at least 1 s, as `Retry-After` (the SDKs retry it); another error does not."""
    if response.status_code not in MODEL_BUSY_STATUSES:
        return {}
    wait = provider_retry_after(response)
    return {"retry_after_seconds": max(UNAVAILABLE_RETRY_AFTER_SECONDS, math.ceil(wait or 0))}


def _snippet(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _refused(content: str, key: str | None, reason: RefusalReason, message: str) -> RefusedFact:
    """A refusal as the response shows it: the model's text and key cut, and their NUL shown as U+FFFD.
    PostgreSQL's text and jsonb cannot hold NUL, and the Idempotency-Key record of the
    response is jsonb: a NUL made the write, and every retry of it, a 500."""
    return RefusedFact(
        content=_snippet(content).replace("\x00", "\ufffd"),
        key=_snippet(key).replace("\x00", "\ufffd") if key is not None else None,
        reason=reason,
        message=message,
    )


async def ask_model(settings: Settings, system: str, user: str) -> ModelAnswer:
    """One chat completion; every way it can fail is a 502 or a 504, never a 500."""
    base_url, model = _configured(settings)
    body = {
        "model": model,
        "temperature": 0,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "haki_extraction", "strict": True, "schema": ANSWER_SCHEMA},
        },
    }
    headers = {"Authorization": f"Bearer {settings.extract_api_key}"} if settings.extract_api_key else {}
    timeout = settings.extract_timeout_seconds
    url = endpoint_url(base_url, "/chat/completions")
    where = redacted_http_url(url)
    try:
        # httpx's timeout bounds each read; asyncio.timeout bounds the whole call (a server that
        # trickles bytes would otherwise hold the request for ever).
        async with asyncio.timeout(timeout), httpx.AsyncClient(timeout=timeout) as http:
            response = await http.post(url, json=body, headers=headers)
    except (TimeoutError, httpx.TimeoutException) as exc:
        log.warning("extraction model at %s: no answer within %g s", where, timeout)
        raise ExtractorTimeout(
            f"The extraction model did not answer within {timeout:g} s (HAKI_EXTRACT_TIMEOUT_SECONDS); "
            "nothing was written.",
            timeout_seconds=timeout,
        ) from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        # The URL is the operator's (userinfo, internal hosts), and so is an error's text.
        log.warning("extraction model at %s unreachable: %s: %s", where, type(exc).__name__, exc)
        raise ExtractorFailed(
            f"Could not reach the extraction model ({type(exc).__name__}); nothing was written."
        ) from exc
    # The endpoint's own body stays in the log: a gateway's error page can name internal hosts or
    # echo the key.
    if response.status_code != 200:
        log.warning(
            "extraction model at %s answered HTTP %d: %s",
            where,
            response.status_code,
            _snippet(response.text),
        )
        raise ExtractorFailed(
            f"The extraction model answered HTTP {response.status_code}; nothing was written.",
            upstream_status=response.status_code,
            **_wait_for(response),
        )
    try:
        completion = msgspec.json.decode(response.content, type=_ChatCompletion)
    except (msgspec.DecodeError, RecursionError) as exc:  # nesting past msgspec's depth: RecursionError
        log.warning("extraction model at %s: not a chat completion: %s", where, _snippet(response.text))
        raise ExtractorFailed(
            f"The extraction endpoint's answer is not a chat completion: {exc}; nothing was written."
        ) from exc
    if not completion.choices:
        raise ExtractorFailed("The extraction model returned no choice; nothing was written.")
    message = completion.choices[0].message
    if message.refusal:
        raise ExtractorFailed(
            f"The extraction model refused: {_snippet(message.refusal)}; nothing was written."
        )
    try:
        return msgspec.json.decode(message.content or "", type=ModelAnswer)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ExtractorFailed(
            f"The extraction model's answer does not follow the schema: {exc}; nothing was written.",
            errors=str(exc),
            answer=_snippet(message.content or ""),
        ) from exc


# --- checking the proposals -----------------------------------------------------------------------

_SPACE = re.compile(r"\s+")


def _same_text(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


@dataclass(frozen=True, slots=True)
class Accepted:
    fact: FactIn
    source_message: int
    supersedes: UUID | None


@dataclass(frozen=True, slots=True)
class Checked:
    accepted: list[Accepted]
    refused: list[RefusedFact]


def _validated(kind: type[S], **fields: Any) -> S:
    """`kind` built as if decoded from a body: its Meta bounds (MAX_BATCH, a content's length, a
    key's) hold as on POST /v1/facts, where a constructor would skip them."""
    return msgspec.convert(fields, kind)


def _is_content(text: str) -> bool:
    try:
        msgspec.convert(text, Content)
    except msgspec.ValidationError:
        return False
    return True


def proposed_contents(answer: ModelAnswer) -> list[str]:
    """The texts the proposals would be written with."""
    return [p.content.strip() for p in answer.facts]


def _served_says(active: dict[str, StaleFact | None], content: str) -> bool:
    """Whether a fact still served holds `content` word for word (active_contents: a stale one
    maps to itself, which a restatement renews)."""
    return content in active and active[content] is None


def check_proposals(
    answer: ModelAnswer,
    n_messages: int,
    known: list[KnownFact],
    model: str,
    *,
    active: dict[str, StaleFact | None],
    now: datetime,
) -> Checked:
    """`active`: the proposed texts an active fact of the scope holds word for word, each with
    the stale fact a restatement renews (None: a fact still served says it, a duplicate); `now`:
    when an accepted fact starts (it has no valid_from), so a fact it supersedes must start
    before. A stale volatile fact is not served, so saying it again renews it: the restatement is
    written and supersedes it, with its stale_after_seconds, unless the proposal supersedes
    another fact itself."""
    accepted: list[Accepted] = []
    refused: list[RefusedFact] = []
    seen = {_same_text(f.content) for f in known if not f.stale}
    stale = {
        _same_text(f.content): StaleFact(fact_id=f.fact_id, stale_after_seconds=f.stale_after_seconds)
        for f in known
        if f.stale and f.stale_after_seconds is not None  # a stale fact is volatile: it has one
    }
    taken: set[UUID] = set()

    def refuse(p: ProposedFact, reason: RefusalReason, message: str) -> None:
        refused.append(_refused(p.content, p.key, reason, message))

    for p, content in zip(answer.facts, proposed_contents(answer), strict=True):
        key = p.key.strip() if p.key is not None else None
        key = key or None  # models write "" for "no key"
        old = known[p.supersedes] if p.supersedes is not None and 0 <= p.supersedes < len(known) else None
        renews = None if p.supersedes is not None else active.get(content) or stale.get(_same_text(content))
        if not _is_content(content):
            refuse(p, "invalid_content", f"content must be 1..{MAX_CONTENT_CHARS} characters without NUL")
        elif key is not None and (problem := scope_id_problem(key)) is not None:
            refuse(p, "invalid_key", f"key {problem}")
        elif not 0 <= p.source_message < n_messages:
            refuse(p, "unknown_source_message", f"source_message {p.source_message} is not a message index")
        elif p.supersedes is not None and old is None:
            refuse(p, "unknown_supersedes", f"supersedes {p.supersedes} is not a known fact index")
        elif old is not None and old.fact_id in taken:
            refuse(p, "supersedes_taken", f"an earlier fact already replaces known fact {p.supersedes}")
        elif old is not None and old.valid_from is not None and old.valid_from >= now:
            refuse(
                p,
                "supersedes_future",
                f"known fact {p.supersedes} starts at {old.valid_from.isoformat()}, not before this "
                "fact, which starts now",
            )
        elif _same_text(content) in seen or _served_says(active, content):
            refuse(p, "duplicate", "an active fact or an earlier proposal already says this")
        elif renews is not None and renews.fact_id in taken:
            refuse(p, "supersedes_taken", "an earlier fact already replaces the stale fact this restates")
        elif len(accepted) == MAX_BATCH:
            refuse(p, "batch_full", f"one extraction writes at most {MAX_BATCH} facts (MAX_BATCH)")
        else:
            seen.add(_same_text(content))
            replaced = old.fact_id if old is not None else renews.fact_id if renews is not None else None
            if replaced is not None:
                taken.add(replaced)
            fact = _validated(
                FactIn,
                content=content,
                key=key,
                volatility=p.volatility,
                supersedes=replaced,
                metadata={"extracted_by": model, "prompt_version": EXTRACT_PROMPT_VERSION},
            )
            if renews is not None and fact.volatility == "volatile":
                # The renewed fact's own window, set after validation: it may be the server's
                # default as it was then, beyond the bound a request's stale_after_seconds has.
                fact = msgspec.structs.replace(fact, stale_after_seconds=renews.stale_after_seconds)
            accepted.append(Accepted(fact=fact, source_message=p.source_message, supersedes=fact.supersedes))
    return Checked(accepted=accepted, refused=refused)


# --- the route's two steps --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything the write transaction needs: checked proposals, embedded events and facts."""

    req: ExtractRequest
    model: str
    checked: Checked
    events: memory.PreparedEvents | None
    facts: memory.PreparedFacts | None
    # The facts shown to the model: erased meanwhile, they make the extraction answer nothing.
    shown: tuple[UUID, ...] = ()


def message_times(messages: list[ExtractMessage], now: datetime) -> list[datetime]:
    return [m.occurred_at or now + timedelta(microseconds=i) for i, m in enumerate(messages)]


async def prepare(
    lent: Lent,
    embedder: Embedder,
    settings: Settings,
    principal: Principal,
    req: ExtractRequest,
) -> Plan:
    """Outside any transaction: the scope's known facts, then the model, the checks of its answer
    and (when writing) the embedder, with the request's connection back in the pool while the
    model and the embedder work: they need no database, and a model may think for seconds
    (docs/reliability.md)."""
    principal.require(req.project_id)
    # Before the model is asked, in both modes: the events would be refused after it.
    for i, m in enumerate(req.messages):
        check_storable(f"messages[{i}].occurred_at", m.occurred_at)
    _, model = _configured(settings)
    now = datetime.now(UTC)
    times = message_times(req.messages, now)
    known = await known_facts(lent.conn, req.project_id, req.subject_id, EXTRACT_KNOWN_FACTS)
    async with lent.set_aside():
        answer = await ask_model(settings, system_prompt(), user_prompt(req.messages, times, known))
    # A text PostgreSQL cannot hold (NUL) is not looked up: check_proposals refuses it.
    contents = [c for c in proposed_contents(answer) if _is_content(c)]
    # lent.conn is read again: it is another connection after set_aside.
    active = await active_contents(lent.conn, req.project_id, req.subject_id, contents) if contents else {}
    checked = check_proposals(answer, len(req.messages), known, model, active=active, now=now)
    shown = tuple(k.fact_id for k in known)
    if not req.write:
        return Plan(req=req, model=model, checked=checked, events=None, facts=None, shown=shown)
    events_req = _validated(
        WriteEventsRequest,
        project_id=req.project_id,
        subject_id=req.subject_id,
        events=[
            _validated(EventIn, content=f"{m.role}: {m.content}", occurred_at=t, metadata={"role": m.role})
            for m, t in zip(req.messages, times, strict=True)
        ],
    )
    facts_req = None
    if checked.accepted:
        facts = [a.fact for a in checked.accepted]
        facts_req = _validated(
            WriteFactsRequest, project_id=req.project_id, subject_id=req.subject_id, facts=facts
        )
    async with lent.set_aside():
        events, prepared = await memory.prepare_extraction(
            embedder, settings, principal, events_req, facts_req
        )
    return Plan(req=req, model=model, checked=checked, events=events, facts=prepared, shown=shown)


async def dry_run(conn: Conn, plan: Plan) -> ExtractResponse:
    # Under the scope's erasure lock, as a write checks: an erasure under way commits first.
    async with conn.transaction():
        await share_erasure_scope(conn, plan.req.project_id, plan.req.subject_id)
        await none_erased(conn, plan)
    return _response(plan, None, None)


async def none_erased(conn: Conn, plan: Plan) -> None:
    """Refuses a plan whose model read a fact erased since: its proposals and refusals may
    restate what the erasure took. A 503, so that a client's retry asks the model again."""
    if plan.shown and await count_erased_known(conn, plan.req.project_id, plan.req.subject_id, plan.shown):
        raise Unavailable(
            "A fact shown to the extraction model was erased while it answered: nothing was "
            "written. Retry: the model is asked again without it."
        )


async def written_meanwhile(conn: Conn, plan: Plan) -> Plan:
    """The plan without the proposals that a fact still served says now: a concurrent extraction
    of the scope wrote it since they were checked (under lock_extraction_scope, so its write has
    committed). They become `duplicate` refusals; the rest keep their vectors."""
    if plan.facts is None:
        return plan
    accepted = plan.checked.accepted
    contents = [a.fact.content for a in accepted]
    held = await active_contents(conn, plan.req.project_id, plan.req.subject_id, contents)
    keep = [i for i, c in enumerate(contents) if not _served_says(held, c)]
    if len(keep) == len(accepted):
        return plan
    late = [
        _refused(a.fact.content, a.fact.key, "duplicate", "a concurrent extraction wrote this fact first")
        for a, c in zip(accepted, contents, strict=True)
        if _served_says(held, c)
    ]
    checked = Checked(accepted=[accepted[i] for i in keep], refused=[*plan.checked.refused, *late])
    facts = memory.only_facts(plan.facts, keep) if keep else None
    return dataclasses.replace(plan, checked=checked, facts=facts)


async def store(conn: Conn, plan: Plan) -> ExtractResponse:
    """One transaction: the events, then the facts linked to them; a refused write undoes both."""
    prepared_events = plan.events
    assert prepared_events is not None
    async with conn.transaction():
        # The scope's erasure lock first, as every write of the scope takes it (store_events
        # takes it again, at no cost), then the extraction's.
        await share_erasure_scope(conn, plan.req.project_id, plan.req.subject_id)
        await lock_extraction_scope(conn, plan.req.project_id, plan.req.subject_id)
        await none_erased(conn, plan)
        plan = await written_meanwhile(conn, plan)
        events = await memory.store_events(conn, prepared_events)
        event_ids = [e.event_id for e in events.events]
        written = None
        if plan.facts is not None:
            sources = [event_ids[a.source_message] for a in plan.checked.accepted]
            try:
                written = await memory.store_facts(conn, memory.with_source_events(plan.facts, sources))
            except InvalidInput as exc:
                raise _of_the_request(exc, plan) from exc
        # The extraction.completed webhook event commits with the extraction or not at all.
        await webhooks_repo.note_extraction_completed(
            conn, plan.req.project_id, plan.req.subject_id, _completed(plan, event_ids, written)
        )
    return _response(plan, event_ids, written)


_WRITTEN_FIELD = re.compile(r"facts\[(\d+)\]\.(\w+)")


def _of_the_request(exc: InvalidInput, plan: Plan) -> InvalidInput:
    """The write's refusal of an accepted proposal (a supersede that lost a race: the fact it
    replaces stopped being active while the model answered), naming `messages[i]`, the message
    the proposal came from: `facts[j]` is a field of the internal write, not of the request."""
    details = dict(exc.details or {})
    field = str(details.pop("field", ""))
    matched = _WRITTEN_FIELD.fullmatch(field)
    if matched is None:
        return exc
    accepted = plan.checked.accepted[int(matched[1])]
    proposed = _snippet(accepted.fact.content)
    problem = exc.message.removeprefix(f"{field}: ")
    return InvalidInput(
        f"messages[{accepted.source_message}]",
        f"the fact the model proposed from this message ({proposed!r}) was refused: its "
        f"{matched[2]} {problem} (the scope changed while the model answered). Nothing was "
        "written: a retry asks the model again.",
        **details,
    )


def _completed(plan: Plan, event_ids: list[UUID], written: WriteFactsResponse | None) -> dict[str, Any]:
    """The extraction.completed payload: ids and counts, no content."""
    facts = written.facts if written is not None else []
    return {
        "subject_id": plan.req.subject_id,
        "model": plan.model,
        "event_ids": [str(e) for e in event_ids],
        "fact_ids": [str(f.fact_id) for f in facts],
        "events": len(event_ids),
        "facts": len(facts),
        "refused": len(plan.checked.refused),
        "in_conflict": sum(1 for f in facts if f.conflict_set_id is not None),
        "superseding": sum(1 for a in plan.checked.accepted if a.supersedes is not None),
    }


def _response(
    plan: Plan, event_ids: list[UUID] | None, written: WriteFactsResponse | None
) -> ExtractResponse:
    facts = []
    for i, a in enumerate(plan.checked.accepted):
        result = written.facts[i] if written is not None else None
        facts.append(
            ExtractedFact(
                fact_id=result.fact_id if result else None,
                content=a.fact.content,
                key=a.fact.key,
                volatility=a.fact.volatility,
                source_message=a.source_message,
                source_event_id=event_ids[a.source_message] if event_ids is not None else None,
                supersedes=a.supersedes,
                conflict_set_id=result.conflict_set_id if result else None,
            )
        )
    return ExtractResponse(
        written=event_ids is not None,
        model=plan.model,
        prompt_version=EXTRACT_PROMPT_VERSION,
        events=[EventWriteResult(event_id=e) for e in event_ids or []],
        facts=facts,
        refused=plan.checked.refused,
    )
