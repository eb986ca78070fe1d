"""Writes that commit while a context call reads: a packet shows one state of its scope.

Each statement of a call reads what had committed when it started (read committed). These tests
commit a write between the call's candidate stage and its multi-hop stage, with sessions of
their own (tests/helpers/serving.py `sessions`). Before the check of service/db/call_runner.py
the packet mixed the two states: a fact of an open ConflictSet served as an expansion, a fact
served beside its successor. Data is committed, each test in a project of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from service.api.auth import Principal
from service.constants import CONTEXT_CALL_RUNS
from service.context.call import ContextCall
from service.db.call_runner import ScopeKeptChanging, run_context_call
from service.embedding.embedder import HashEmbedder
from service.errors import EmbeddingModelMismatch
from service.memory import erasure
from service.memory import writes as memory
from service.repository import context as context_repo
from service.repository import embedding_model
from service.settings import Settings
from service.structs import ContextPacket, ContextRequest, FactIn, WriteFactsRequest
from tests.helpers.serving import sessions

# Facts that do not name the subject's entity: "Zorblax" stays informative (at most half of the
# scope's texts name it), so the multi-hop stage reads the facts naming it.
OTHERS = [
    "The office coffee machine is broken again.",
    "Rain is expected on Friday afternoon.",
    "The quarterly report is due next week.",
    "Parking moved to level three.",
]


@pytest.fixture
async def principal(settings: Settings, migrated: str) -> AsyncIterator[Principal]:
    """A project of the test's own, its subject `s` erased afterwards."""
    principal = Principal(project_id=f"race-{uuid.uuid4().hex[:12]}", key_id=uuid.uuid4())
    yield principal
    async with sessions(settings, 1) as (conn,):
        await erasure.erase_subject(conn, principal, settings, principal.project_id, "s")


async def write(
    conn: asyncpg.Connection, settings: Settings, principal: Principal, facts: list[FactIn]
) -> list[uuid.UUID]:
    """Facts of (the principal's project, `s`), committed; their ids."""
    req = WriteFactsRequest(project_id=principal.project_id, subject_id="s", facts=facts)
    written = await memory.write_facts(conn, HashEmbedder(), settings, principal, req)
    return [f.fact_id for f in written.facts]


def before_multi_hop(monkeypatch: pytest.MonkeyPatch, step: Callable[[int], Awaitable[None]]) -> list[int]:
    """Runs `step(n)` before the n-th run's multi-hop stage (`unified`'s linked_facts) reads;
    the runs so far."""
    runs: list[int] = []
    linked = context_repo.linked_facts

    async def write_then_link(*args: Any, **kwargs: Any) -> Any:
        runs.append(len(runs) + 1)
        await step(runs[-1])
        return await linked(*args, **kwargs)

    monkeypatch.setattr(context_repo, "linked_facts", write_then_link)
    return runs


def written_during_first_run(
    writer: asyncpg.Connection,
    settings: Settings,
    principal: Principal,
    monkeypatch: pytest.MonkeyPatch,
    fact: FactIn,
) -> tuple[list[uuid.UUID], list[int]]:
    """`fact` committed before the first run's multi-hop stage: its id (once written), the runs."""
    written: list[uuid.UUID] = []

    async def write_once(run: int) -> None:
        if run == 1:
            written.extend(await write(writer, settings, principal, [fact]))

    return written, before_multi_hop(monkeypatch, write_once)


async def call(conn: asyncpg.Connection, settings: Settings, principal: Principal) -> ContextPacket:
    request = ContextRequest(project_id=principal.project_id, subject_id="s", query="tea every morning")
    return await run_context_call(conn, HashEmbedder(), ContextCall.of(request, settings))


async def test_a_rival_written_during_the_call_hides_both_claims(
    settings: Settings, principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rival commits after the candidates were read: the call runs again and serves neither
    claim (an open set's members are never served). It served the first claim, read before the
    rival, and the rival itself as an expansion (the open sets of the first statement)."""
    async with sessions(settings, 3) as (caller, writer, observer):
        globex, *_ = await write(
            writer, settings, principal,
            [FactIn(content="Zorblax works at Globex.", key="employer"),
             FactIn(content="Zorblax drinks tea every morning."), *(FactIn(content=c) for c in OTHERS)],
        )  # fmt: skip
        rival = FactIn(content="Zorblax works at Initech.", key="employer")
        rivals, runs = written_during_first_run(writer, settings, principal, monkeypatch, rival)
        packet = await call(caller, settings, principal)
        served = {f.fact_id for f in packet.facts}
        assert served and not served & {globex, *rivals}
        assert runs == [1, 2], "the call ran once more after the rival"
        traced = await context_repo.get_inspection(observer, principal.project_id, packet.trace_id)
        assert traced is not None
        blocked = {d.item_id: d.reason_code for d in traced.decisions if d.decision == "blocked"}
        assert blocked == {globex: "conflict_open", rivals[0]: "conflict_open"}


async def test_a_successor_written_during_the_call_is_served_alone(
    settings: Settings, principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The successor commits after the candidates were read: the packet holds it, not the fact
    it supersedes. It held both (the first from the candidates, the successor as an expansion)."""
    async with sessions(settings, 2) as (caller, writer):
        old, *_ = await write(
            writer, settings, principal,
            [FactIn(content="Zorblax works at Globex."), FactIn(content="Zorblax drinks tea every morning."),
             *(FactIn(content=c) for c in OTHERS)],
        )  # fmt: skip
        successor_in = FactIn(content="Zorblax works at Initech.", supersedes=old)
        successor, runs = written_during_first_run(writer, settings, principal, monkeypatch, successor_in)
        packet = await call(caller, settings, principal)
        served = {f.fact_id for f in packet.facts}
        assert old not in served
        assert successor[0] in served
        assert runs == [1, 2]


async def test_a_scope_that_changes_during_every_run_is_a_503_and_no_trace(
    settings: Settings, principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write during each of CONTEXT_CALL_RUNS runs, each superseding the fact the run served:
    a 503 to retry, nothing traced."""
    async with sessions(settings, 3) as (caller, writer, observer):
        current = await write(
            writer, settings, principal,
            [FactIn(content="Zorblax drinks tea every morning."), *(FactIn(content=c) for c in OTHERS)],
        )  # fmt: skip

        async def supersede(run: int) -> None:
            successor = FactIn(content=f"Zorblax drinks tea every morning, cup {run}.", supersedes=current[0])
            current[0:1] = await write(writer, settings, principal, [successor])

        runs = before_multi_hop(monkeypatch, supersede)
        with pytest.raises(ScopeKeptChanging) as info:
            await call(caller, settings, principal)
        assert runs == list(range(1, CONTEXT_CALL_RUNS + 1))
        assert info.value.status_code == 503 and "retry_after_seconds" in (info.value.details or {})
        overview = await context_repo.stats_overview(observer, principal.project_id)
        assert overview.context_calls == 0


async def test_a_model_switch_during_the_call_is_a_409_not_the_wrong_neighbours(
    settings: Settings, principal: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-embedding's switch commits after the call checked the project's model: the call runs
    again, and its model check refuses it. It ranked its query of the old model against the
    vectors of the new one, and answered 200 (a black-box race against `haki reembed`)."""
    async with sessions(settings, 3) as (caller, writer, observer):
        await write(
            writer, settings, principal,
            [FactIn(content="Zorblax drinks tea every morning."), *(FactIn(content=c) for c in OTHERS)],
        )  # fmt: skip

        async def switch(run: int) -> None:
            async with writer.transaction():
                await embedding_model.switch_model(writer, principal.project_id, "another-model")

        runs = before_multi_hop(monkeypatch, switch)
        with pytest.raises(EmbeddingModelMismatch):
            await call(caller, settings, principal)
        assert runs == [1]
        assert (await context_repo.stats_overview(observer, principal.project_id)).context_calls == 0
