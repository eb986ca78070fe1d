# Generated from _async.py by sdk/python/make_sync.py: edit _async.py, then run it.
# An async generator cannot `yield from`: its `for ...: yield` loops stay as they are.
# ruff: noqa: UP028
# fmt: off
"""`Haki`: the blocking client, method for method the same as `AsyncHaki`."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

import httpx

from haki_client import models
from haki_client._core import (
    TRANSPORT_ERRORS,
    UNSENT_ERRORS,
    Call,
    Core,
    ExportLines,
    RetryPolicy,
    connection_error,
    decode_response,
    error_from,
    extract_call,
    key_in_progress,
    may_resend,
    parse_retry_after,
    request_headers,
    request_options,
    should_retry,
    write_error,
)

T = TypeVar("T")


class Haki:
    """Blocking client of one Haki server.

    `api_key` defaults to $HAKI_API_KEY and `base_url` to $HAKI_BASE_URL (else
    http://127.0.0.1:8000). `project_id` is optional: without it, calls name no project and the
    server uses the key's (a key reaches one project only); given, it is the default of every
    call that names a project, and each such method also takes it. Calls by id (`get_fact`,
    `inspect`, `resolve_conflict`...) act on the key's project. `timeout`: seconds an attempt
    waits (a call that the server may take longer for waits longer, see each), or None for no
    limit; anything else raises at construction.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        project_id: str | None = None,
        timeout: float | None = 10.0,
        max_retries: int = 3,
        backoff: float = 0.25,
        max_wait: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._core = Core(base_url, api_key, project_id, RetryPolicy(max_retries, backoff, max_wait), timeout)
        self._http = httpx.Client(
            base_url=self._core.base_url,
            timeout=self._core.timeout,
            headers=self._core.headers(),
            transport=transport,
        )

    @property
    def project_id(self) -> str | None:
        return self._core.project_id

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Haki:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        return decode_response(call, self._send(call))

    def _send(self, call: Call[Any], *, stream: bool = False) -> httpx.Response:
        """The answer to `call`, after the retries RetryPolicy allows; `stream`: its body not read
        yet (the caller closes it). A write's error answer is raised here (write_error)."""
        retry = self._core.retry
        headers = request_headers(call)
        key = headers.get("Idempotency-Key")
        request = self._http.build_request(
            call.method,
            call.path,
            params=call.params,
            content=call.body,
            headers=headers,
            **request_options(call),
        )
        attempt = 0
        unsent = True  # no attempt so far can have reached the server
        while True:
            try:
                response = self._http.send(request, stream=stream)
                if stream and not response.is_success:
                    # An error answer is read whole: should_retry reads a 503's body, a failure
                    # reading it is retried as the request's own, and the caller raises from it.
                    try:
                        response.read()
                    finally:
                        response.close()
            except TRANSPORT_ERRORS as exc:
                # An attempt whose answer was lost may have applied the call: whatever the later
                # attempts got, its outcome stays unknown.
                unsent = unsent and isinstance(exc, UNSENT_ERRORS)
                if not may_resend(call, exc) or attempt >= retry.max_retries:
                    raise connection_error(call, exc, unsent, key) from exc
                time.sleep(retry.delay(attempt, None))
                attempt += 1
                continue
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            # A Retry-After past max_wait is not cut short: the error is raised, carrying it.
            if should_retry(response) and attempt < retry.max_retries and retry.waits_for(retry_after):
                # A write under this key is in flight: it may commit.
                unsent = unsent and not key_in_progress(response)
                response.close()
                time.sleep(retry.delay(attempt, retry_after))
                attempt += 1
                continue
            if not (response.is_success or call.reads_only):
                # Raised here, where the attempts are known: an earlier one may have applied it.
                raise write_error(call, response, key, unsent)
            return response

    # --- write side ----------------------------------------------------------------------------

    def write_facts(
        self,
        subject_id: str,
        facts: Sequence[models.FactIn | str | Mapping[str, Any]],
        *,
        project_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.WriteFactsResponse:
        """Writes 1..1000 facts atomically; a plain string is a fact with only `content`.

        `idempotency_key` (1..255 visible ASCII characters, e.g. a UUID) is sent with every
        attempt instead of a key of the client's own: sending the same call again with it, after
        the retries ran out, gets the first answer back if it was written, and writes nothing
        twice (docs/spec/api.md, "Idempotency"). As do `write_events` and `extract`."""
        return self._run(self._core.write_facts(subject_id, facts, project_id, idempotency_key))

    def get_fact(self, fact_id: UUID | str) -> models.Fact:
        return self._run(self._core.get_fact(fact_id))

    def list_facts(
        self,
        subject_id: str | None = None,
        *,
        status: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        project_id: str | None = None,
    ) -> models.FactPage:
        return self._run(self._core.list_facts(subject_id, status, limit, cursor, project_id))

    def iter_facts(
        self,
        subject_id: str | None = None,
        *,
        status: str | None = None,
        page_size: int | None = None,
        project_id: str | None = None,
    ) -> Iterator[models.Fact]:
        """Every matching fact, page after page (keyset pagination)."""
        cursor: str | None = None
        while True:
            page = self.list_facts(
                subject_id, status=status, limit=page_size, cursor=cursor, project_id=project_id
            )
            for fact in page.facts:
                yield fact
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def patch_fact(
        self, fact_id: UUID | str, *, status: str | None = None, valid_to: datetime | None = None
    ) -> models.Fact:
        return self._run(self._core.patch_fact(fact_id, status, valid_to))

    def retract_fact(self, fact_id: UUID | str) -> models.Fact:
        return self.patch_fact(fact_id, status="retracted")

    def write_events(
        self,
        subject_id: str,
        events: Sequence[models.EventIn | Mapping[str, Any]],
        *,
        project_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.WriteEventsResponse:
        return self._run(self._core.write_events(subject_id, events, project_id, idempotency_key))

    def list_conflicts(
        self,
        subject_id: str | None = None,
        *,
        status: str | None = None,
        cursor: str | None = None,
        project_id: str | None = None,
    ) -> models.ConflictList:
        return self._run(self._core.list_conflicts(subject_id, status, cursor, project_id))

    def resolve_conflict(
        self, conflict_set_id: UUID | str, keep: Sequence[UUID | str]
    ) -> models.ConflictSet:
        return self._run(self._core.resolve_conflict(conflict_set_id, keep))

    # --- read side -----------------------------------------------------------------------------

    def context(
        self,
        subject_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        include_episodes: bool | None = None,
        profile: models.ContextProfile | None = None,
        project_id: str | None = None,
        as_of: datetime | None = None,
    ) -> models.ContextPacket:
        """The memory packet for `query`, within `budget_tokens`.

        `profile` ("unified" or "facts_first") picks the assembler's rules for this call; None
        leaves the deployment default (HAKI_CONTEXT_PROFILE). The packet says which one built it.
        `as_of` (a timezone-aware datetime, not in the future) asks for the packet the memory
        would have given at that instant (docs/time-travel.md).

        An attempt waits CONTEXT_TIMEOUT_SECONDS (30 s), or the client's timeout when longer: on a
        slow embedder the server answers a `degraded` packet after its HAKI_EMBED_TIMEOUT_SECONDS
        (10 s), which the client's default 10 s would not wait for. As does `replay`.
        """
        return self._run(
            self._core.context(subject_id, query, budget_tokens, include_episodes, profile, project_id, as_of)
        )

    def inspect(self, trace_id: UUID | str) -> models.Inspection:
        return self._run(self._core.inspect(trace_id))

    def stats(self, *, project_id: str | None = None) -> models.StatsOverview:
        return self._run(self._core.stats(project_id))

    def healthz(self) -> models.Health:
        return self._run(self._core.healthz())

    def replay(
        self,
        trace_id: UUID | str,
        *,
        budget_tokens: int | None = None,
        profile: models.ContextProfile | None = None,
        recall_max_distance: float | None = None,
        as_of: datetime | None = None,
    ) -> models.ReplayResult:
        """Rebuilds the packet of a traced call (by default as of the call's own instant, with its
        budget, profile and floor; each argument overrides one) and diffs it against the
        original: `result.diff.added`, `.removed`, `.moved`. The replay is traced too."""
        return self._run(
            self._core.replay(trace_id, budget_tokens, profile, recall_max_distance, as_of)
        )

    def fact_stats(
        self,
        subject_id: str | None = None,
        *,
        order: str | None = None,
        limit: int | None = None,
        project_id: str | None = None,
    ) -> models.FactStats:
        """What each active fact is worth: `order` "never_served", "most_served" (the server's
        default) or "most_dropped" (most often left out for the budget)."""
        return self._run(self._core.fact_stats(subject_id, order, limit, project_id))

    # --- extraction ----------------------------------------------------------------------------

    def extract(
        self,
        subject_id: str,
        messages: Sequence[models.ExtractMessage | Mapping[str, Any]],
        *,
        write: bool = True,
        project_id: str | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
    ) -> models.ExtractResult:
        """Stores each chat message as an event and the durable facts the server's chat model
        (HAKI_EXTRACT_*) finds in them, linked to their events; `write=False` is a dry run.
        `result.refused` lists what the model proposed and Haki refused, and why. `timeout`
        defaults to 120 s, or the client's timeout when longer: the server waits for its model.
        `idempotency_key`: as in `write_facts`."""
        return self._run(
            extract_call(self._core, subject_id, messages, write, project_id, timeout, idempotency_key)
        )

    # --- memory lifecycle: erasure, listing, export --------------------------------------------

    def erase_subject(self, subject_id: str, project_id: str | None = None) -> models.SubjectErasure:
        """Erases every fact, event, conflict set and trace of the subject, in one transaction;
        answers the count of each kind. Irreversible. Waits up to 125 s (the server's
        HAKI_ERASURE_TIMEOUT_MS is 120 s), or the client's timeout when longer, as do
        `delete_fact` and `delete_event`; a lost answer is not resent (RetryPolicy)."""
        return self._run(self._core.erase_subject(subject_id, project_id))

    def delete_fact(self, fact_id: UUID | str) -> models.FactErasure:
        """Erases one fact (to stop serving it but keep it, use `retract_fact`)."""
        return self._run(self._core.delete_fact(fact_id))

    def delete_event(self, event_id: UUID | str) -> models.EventErasure:
        return self._run(self._core.delete_event(event_id))

    def list_events(
        self,
        subject_id: str | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        project_id: str | None = None,
    ) -> models.EventPage:
        return self._run(self._core.list_events(subject_id, limit, cursor, project_id))

    def iter_events(
        self, subject_id: str | None = None, *, page_size: int | None = None, project_id: str | None = None
    ) -> Iterator[models.Event]:
        """Every matching event, page after page (keyset pagination)."""
        cursor: str | None = None
        while True:
            page = self.list_events(subject_id, limit=page_size, cursor=cursor, project_id=project_id)
            for event in page.events:
                yield event
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_event(self, event_id: UUID | str) -> models.Event:
        return self._run(self._core.get_event(event_id))

    def list_subjects(
        self, *, limit: int | None = None, cursor: str | None = None, project_id: str | None = None
    ) -> models.SubjectPage:
        return self._run(self._core.list_subjects(limit, cursor, project_id))

    def export_subject(
        self, subject_id: str, project_id: str | None = None
    ) -> Generator[dict[str, Any], None]:
        """The subject's export document, line by line as it streams: the header, then every event,
        every fact, every conflict set and an end line counting them (`item["kind"]`). `haki
        import FILE` reads the lines back (one JSON object per line); a line that is not one
        raises `HakiError` `invalid_response`.

        To stop before the end, iterate inside `contextlib.aclosing(...)` (`contextlib.closing`
        for `Haki`): leaving its block closes the response at once, where an abandoned generator
        keeps it open until it is garbage collected, and the server its connection and
        transaction with it."""
        call = self._core.export_subject(subject_id, project_id)
        response = self._send(call, stream=True)
        try:
            if response.status_code != 200:
                response.read()
                raise error_from(response)
            lines = ExportLines(call)
            for chunk in response.iter_bytes():
                for item in lines.feed(chunk):
                    yield item
            for item in lines.end():
                yield item
        except TRANSPORT_ERRORS as exc:  # the stream broke off: not resent, lines were yielded
            raise connection_error(call, exc) from exc
        finally:
            response.close()

    # --- webhooks (docs/webhooks.md) -----------------------------------------------------------

    def create_webhook(
        self,
        url: str,
        events: Sequence[str],
        *,
        include_content: bool = False,
        project_id: str | None = None,
    ) -> models.WebhookCreated:
        """Subscribes `url` to the project's `events` ("conflict.opened", "fact.retracted", ...).
        The answer's `secret` is shown this once: verify each delivery with it
        (`haki_client.webhooks.verify_signature`). A lost answer is not resent (RetryPolicy)."""
        return self._run(self._core.create_webhook(url, events, include_content, project_id))

    def list_webhooks(self, *, project_id: str | None = None) -> models.WebhookList:
        """The project's webhooks, without their secrets, with their deliveries by status."""
        return self._run(self._core.list_webhooks(project_id))

    def delete_webhook(self, webhook_id: UUID | str) -> models.WebhookDeleted:
        """Deletes a webhook and its deliveries."""
        return self._run(self._core.delete_webhook(webhook_id))

    def list_webhook_deliveries(
        self, webhook_id: UUID | str, *, status: str | None = None, limit: int | None = None
    ) -> models.WebhookDeliveryList:
        """A webhook's deliveries, newest first; `status="dead"`: its dead letters."""
        return self._run(self._core.list_webhook_deliveries(webhook_id, status, limit))
