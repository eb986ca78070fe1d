"""An export imported back is the original, modulo ids: fact statuses and valid times, conflict
sets (status, members) and what a context call serves (docs/lifecycle.md, "Listing and
exporting"). Before haki_export 2 the import replayed the facts through the write path and
guessed the sets: each case below came back different. Also: two imports of one subject at once,
and the lines an import refuses."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from service.api.auth import Principal
from service.embedding.embedder import Embedder, HashEmbedder
from service.errors import Conflict
from service.memory import erasure, export
from service.memory import writes as memory
from service.settings import Settings
from service.structs import FactIn, WriteFactsRequest
from tests.helpers import PROJECT, bearer, context, fact_ids, list_all_facts, write_facts
from tests.helpers.serving import sessions, waits_or_ends

Client = httpx.AsyncClient


async def retract(client: Client, key: str, fact_id: str) -> None:
    r = await client.patch(f"/v1/facts/{fact_id}", json={"status": "retracted"}, headers=bearer(key))
    assert r.status_code == 200, r.text


async def resolve(client: Client, key: str, set_id: str, keep: list[str]) -> None:
    r = await client.post(f"/v1/conflicts/{set_id}/resolve", json={"keep": keep}, headers=bearer(key))
    assert r.status_code == 200, r.text


async def case_a(client: Client, key: str, s: str) -> None:
    """A successor of one member of an open set joins it: the set stays open."""
    red, _ = await fact_ids(client, key, [{"content": "Team is red", "key": "team"},
                                          {"content": "Team is blue", "key": "team"}], s)  # fmt: skip
    await write_facts(client, key, [{"content": "Team is green", "key": "team", "supersedes": red}], s)


async def case_b(client: Client, key: str, s: str) -> None:
    """One of three rivals retracted: two claims are left, the set stays open."""
    ids = await fact_ids(
        client, key, [{"content": f"Born in {c}", "key": "birth"} for c in ("Rome", "Oslo", "Kyiv")], s
    )
    await retract(client, key, ids[0])


async def case_c(client: Client, key: str, s: str) -> None:
    """Two rivals resolved keeping both: resolved, both served."""
    written = await write_facts(client, key, [{"content": "Speaks French", "key": "lang"},
                                              {"content": "Speaks Dutch", "key": "lang"}], s)  # fmt: skip
    await resolve(client, key, written[0]["conflict_set_id"], [w["fact_id"] for w in written])


async def case_d(client: Client, key: str, s: str) -> None:
    """A resolved set, then a new rival of the kept fact: a second set, open."""
    written = await write_facts(client, key, [{"content": "Likes tea", "key": "drink"},
                                              {"content": "Likes coffee", "key": "drink"}], s)  # fmt: skip
    await resolve(client, key, written[0]["conflict_set_id"], [written[0]["fact_id"]])
    await write_facts(client, key, [{"content": "Likes juice", "key": "drink"}], s)


async def case_e(client: Client, key: str, s: str) -> None:
    """A retracted fact, then another of its key: retracted stays retracted, no set."""
    (paris,) = await fact_ids(client, key, [{"content": "Lives in Paris", "key": "city"}], s)
    await retract(client, key, paris)
    await write_facts(client, key, [{"content": "Lives in Berlin", "key": "city"}], s)


async def case_f(client: Client, key: str, s: str) -> None:
    """One of two rivals retracted: the set resolves by itself, the retracted stays retracted."""
    a, _ = await fact_ids(client, key, [{"content": "Owns a cat", "key": "pet"},
                                        {"content": "Owns a dog", "key": "pet"}], s)  # fmt: skip
    await retract(client, key, a)


CASES: dict[str, Callable[[Client, str, str], Awaitable[None]]] = {
    "a_successor_joins_open_set": case_a,
    "b_retracted_one_of_three": case_b,
    "c_resolved_keeping_both": case_c,
    "d_second_set_of_a_key": case_d,
    "e_retracted_then_same_key": case_e,
    "f_retraction_resolves_set": case_f,
}


async def reads(client: Client, key: str, subject: str) -> dict[str, Any]:
    """What the read routes say of a subject, ids replaced by contents."""
    facts = await list_all_facts(client, key, subject_id=subject)
    content = {f["fact_id"]: f["content"] for f in facts}
    r = await client.get("/v1/conflicts", params={"subject_id": subject}, headers=bearer(key))
    sets = r.json()["conflicts"]
    packet = await context(client, key, "team birth lang drink city pet", subject, profile="facts_first")
    return {
        "facts": [
            (
                f["content"],
                f["key"],
                f["status"],
                f["valid_from"],
                f["valid_to"],
                content.get(f["supersedes"]),
                f["conflict_set_id"] is not None,
            )
            for f in facts
        ],
        "sets": sorted(
            (
                c["key"],
                c["status"],
                c["created_at"],
                c["resolved_at"],
                sorted((m["content"], m["status"]) for m in c["members"]),
            )
            for c in sets
        ),
        "served": sorted(f["content"] for f in packet["facts"]),
    }


async def import_export(
    client: Client, conn: asyncpg.Connection, key: str, settings: Settings, embedder: Embedder, subject: str
) -> export.ImportSummary:
    lines = (await client.get(f"/v1/subjects/{subject}/export", headers=bearer(key))).content.splitlines()
    principal = Principal(project_id=PROJECT, key_id=uuid.UUID(int=0))
    doc = export.parse_document(lines)
    return await export.import_document(conn, embedder, settings, principal, doc, PROJECT, f"{subject}-copy")


@pytest.mark.parametrize("case", list(CASES))
async def test_an_export_imports_back_as_it_was(
    client: Client, conn: asyncpg.Connection, key: str, settings: Settings, hash_embedder: Embedder, case: str
) -> None:
    subject = f"case-{case[0]}"
    await CASES[case](client, key, subject)
    original = await reads(client, key, subject)
    await import_export(client, conn, key, settings, hash_embedder, subject)
    assert await reads(client, key, f"{subject}-copy") == original


def _doc(*items: dict[str, Any], version: int = 2) -> list[bytes]:
    header = {
        "haki_export": version,
        "project_id": "p",
        "subject_id": "s",
        "exported_at": "2026-01-01T00:00:00Z",
    }
    lines = [msgspec.json.encode(header), *(msgspec.json.encode(i) for i in items)]
    if version >= 2:  # the end line an export writes, counting the lines before it
        kinds = [i.get("kind") for i in items]
        counts = {"events": kinds.count("event"), "facts": kinds.count("fact"),
                  "conflict_sets": kinds.count("conflict_set")}  # fmt: skip
        lines.append(msgspec.json.encode({"kind": "end", **counts}))
    return lines


def test_a_document_cut_short_or_run_on_is_refused() -> None:
    """A version 2 document ends with a line counting the lines of each kind: a copy stopped at
    a line's end lacks it, or has other counts, and was imported in part."""
    a, b = _fact("Team is red", key="team"), _fact("Likes tea")
    whole = _doc(a, b)
    assert len(export.parse_document(whole).facts) == 2
    with pytest.raises(ValueError, match="no end line: it was cut short"):
        export.parse_document(whole[:-1])
    with pytest.raises(ValueError, match=r"line 3: the end line counts .*facts 1 read, 2 exported"):
        export.parse_document([*whole[:2], whole[-1]])
    with pytest.raises(ValueError, match="line 5: a line after the document's end line"):
        export.parse_document([*whole, msgspec.json.encode(_fact("More"))])
    with pytest.raises(ValueError, match="line 3: an end line comes in haki_export 2"):
        export.parse_document([*_doc(a, version=1), _doc(a)[-1]])


def _fact(content: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "fact", "fact_id": str(uuid.uuid4()), "content": content, **fields}


@pytest.mark.parametrize("version", [1, 2])
def test_an_unknown_field_is_refused_naming_its_line(version: int) -> None:
    misspelt = _fact("Lives in Rome", valid_form="2020-01-01T00:00:00Z")
    with pytest.raises(ValueError, match=r"line 3: .*unknown field `valid_form`"):
        export.parse_document(_doc(_fact("fine"), misspelt, version=version))
    event = {"kind": "event", "event_id": str(uuid.uuid4()), "content": "x",
             "occurred_at": "2026-01-01T00:00:00Z", "ocurred": 1}  # fmt: skip
    with pytest.raises(ValueError, match=r"line 2: .*unknown field `ocurred`"):
        export.parse_document(_doc(event, version=version))
    (header, *_) = _doc()
    with pytest.raises(ValueError, match=r"line 1: .*unknown field `x`"):
        export.parse_document([header.replace(b"}", b', "x": 1}')])


def test_a_successor_of_a_retracted_fact_is_refused() -> None:
    gone = _fact("Lives in Rome", status="retracted", valid_to="2026-01-01T00:00:00Z")
    with pytest.raises(ValueError, match=r"line 3: supersedes .*retracted"):
        export.parse_document(_doc(gone, _fact("Lives in Oslo", supersedes=gone["fact_id"])))


def test_conflict_set_lines_are_checked() -> None:
    a, b = _fact("Team is red", key="team"), _fact("Team is blue", key="team")
    other = _fact("Likes tea", key="drink")
    good = {"kind": "conflict_set", "conflict_set_id": str(uuid.uuid4()), "key": "team", "status": "open",
            "members": [a["fact_id"], b["fact_id"]]}  # fmt: skip
    doc = export.parse_document(_doc(a, b, other, good))
    assert doc.version == 2 and len(doc.conflict_sets) == 1
    for bad, problem in [
        ({**good, "members": [a["fact_id"], other["fact_id"]]}, "another key"),
        ({**good, "members": [str(uuid.uuid4())]}, "no fact before it"),
        ({**good, "resolved_at": "2026-01-01T00:00:00Z"}, "open conflict set has no resolved_at"),
        ({**good, "status": "unsure"}, "status"),
    ]:
        with pytest.raises(ValueError, match=f"line 5: .*{problem}"):
            export.parse_document(_doc(a, b, other, bad))
    with pytest.raises(ValueError, match="line 6: a second open conflict set"):
        export.parse_document(_doc(a, b, other, good, {**good, "conflict_set_id": str(uuid.uuid4())}))
    with pytest.raises(ValueError, match="line 5: conflict_set lines come in haki_export 2"):
        export.parse_document(_doc(a, b, other, good, version=1))


@pytest.mark.parametrize("version", [1, 2])
async def test_two_imports_of_one_subject_at_once_one_is_refused(
    settings: Settings, migrated: str, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """The second import waits for the first one's scope lock, then finds the subject taken and
    writes nothing; a write of the subject meanwhile waits too. Before, both imports wrote. A
    version 1 document, replayed through the write path, takes the same lock."""
    project = f"imp-{uuid.uuid4().hex[:12]}"
    principal = Principal(project_id=project, key_id=uuid.uuid4())
    event = {"kind": "event", "event_id": str(uuid.uuid4()), "content": "Met Dan",
             "occurred_at": "2026-01-01T00:00:00Z"}  # fmt: skip
    facts = [_fact(f"Fact {i}") for i in range(5)]
    doc = export.parse_document(_doc(event, *facts, version=version))
    store_events = memory.store_events
    embedder = HashEmbedder()
    async with sessions(settings, 4) as (first, second, writer, observer):
        others: list[asyncio.Task[Any]] = []

        async def after_the_others_wait(conn: asyncpg.Connection, prepared: Any) -> Any:
            if conn is first and not others:
                others.append(asyncio.create_task(
                    export.import_document(second, embedder, settings, principal, doc, project, "s")
                ))  # fmt: skip
                assert await waits_or_ends(observer, others[0], second), "the second import did not wait"
                req = WriteFactsRequest(project_id=project, subject_id="s", facts=[FactIn(content="later")])
                others.append(
                    asyncio.create_task(memory.write_facts(writer, embedder, settings, principal, req))
                )
                assert await waits_or_ends(observer, others[1], writer), "the write did not wait"
            return await store_events(conn, prepared)

        monkeypatch.setattr(memory, "store_events", after_the_others_wait)
        summary = await export.import_document(first, embedder, settings, principal, doc, project, "s")
        with pytest.raises(Conflict, match="empty subject"):
            await others[0]
        await others[1]
        try:
            assert summary.facts == 5
            listed = await memory.list_facts(observer, principal, project, "s", None, 100, None)
            assert sorted(f.content for f in listed.facts) == sorted(
                [*(f["content"] for f in facts), "later"]
            )
        finally:
            await erasure.erase_subject(observer, principal, settings, project, "s")


async def test_a_version_1_retraction_in_a_conflict_set_stays_retracted(
    client: Client, conn: asyncpg.Connection, key: str, settings: Settings, hash_embedder: Embedder
) -> None:
    """A version 1 document replays the writes: rivals open a set, then the exported statuses
    apply. The retracted rival stays retracted (resolving the set first superseded it, and the
    PATCH was refused); one claim left resolves its set. Version 1 names a fact's set only while
    it is open: two claims left that name none were served (their set resolved keeping both),
    two that name theirs keep it open."""
    tennis, golf = _fact("Plays tennis", key="sport"), _fact("Plays golf", key="sport", status="retracted")
    rome, oslo = _fact("Born in Rome", key="birth"), _fact("Born in Oslo", key="birth")
    kyiv = _fact("Born in Kyiv", key="birth", status="retracted")
    city_set = str(uuid.uuid4())
    lyon = _fact("Lives in Lyon", key="city", conflict_set_id=city_set)
    nice = _fact("Lives in Nice", key="city", conflict_set_id=city_set)
    pau = _fact("Lives in Pau", key="city", status="retracted")
    doc = export.parse_document(_doc(tennis, golf, rome, oslo, kyiv, lyon, nice, pau, version=1))
    principal = Principal(project_id=PROJECT, key_id=uuid.UUID(int=0))
    summary = await export.import_document(conn, hash_embedder, settings, principal, doc, PROJECT, "v1")
    assert (summary.retracted, summary.conflicts_resolved) == (3, 2)
    got = await reads(client, key, "v1")
    assert sorted((f[0], f[2]) for f in got["facts"]) == [
        ("Born in Kyiv", "retracted"),
        ("Born in Oslo", "active"),
        ("Born in Rome", "active"),
        ("Lives in Lyon", "active"),
        ("Lives in Nice", "active"),
        ("Lives in Pau", "retracted"),
        ("Plays golf", "retracted"),
        ("Plays tennis", "active"),
    ]
    birth = [("Born in Kyiv", "retracted"), ("Born in Oslo", "active"), ("Born in Rome", "active")]
    city = [("Lives in Lyon", "active"), ("Lives in Nice", "active"), ("Lives in Pau", "retracted")]
    assert [(s[0], s[1], s[4]) for s in got["sets"]] == [
        ("birth", "resolved", birth),
        ("city", "open", city),
        ("sport", "resolved", [("Plays golf", "retracted"), ("Plays tennis", "active")]),
    ]
    assert got["served"] == ["Born in Oslo", "Born in Rome", "Plays tennis"]
