"""Each project records the model its vectors were made with; another model is refused, clearly.

The hash embedder stands in for two models: `HAKI_EMBED_MODEL` salts it into another vector space
under another name (`hash:<model>`), as a second real model would be.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import numpy as np
import pytest

from service.context import assembler
from service.embedding.embedder import (
    LOCAL_MODEL_NAME,
    HashEmbedder,
    build_embedder,
    local_model_label,
)
from service.errors import EmbeddingModelMismatch
from service.repository import embedding_model
from service.settings import Settings
from tests.helpers import (
    PROJECT,
    CountingEmbedder,
    assert_error,
    bearer,
    context,
    post_context,
    post_events,
    post_facts,
    write_facts,
)
from tests.helpers.app import SharedApp
from tests.helpers.sql import load_test_queries

MODEL_B = "model-b"


@pytest.fixture(scope="module")
def embedder_b() -> CountingEmbedder:
    return CountingEmbedder(model=MODEL_B)


@pytest.fixture(scope="module")
def app_b(settings: Settings, embedder_b: CountingEmbedder) -> SharedApp:
    return SharedApp(settings, embedder_b)


@pytest.fixture
async def client_b(app_b: SharedApp, conn: asyncpg.Connection) -> AsyncIterator[httpx.AsyncClient]:
    """The same database served by a second model (the hash embedder salted as MODEL_B)."""
    async with app_b.client(conn) as c:
        yield c


def test_a_named_hash_model_is_another_vector_space_under_another_name() -> None:
    plain, b = HashEmbedder(), HashEmbedder(model=MODEL_B)
    assert plain.name == "hash" and b.name == f"hash:{MODEL_B}"
    text = "Alice moved to Lisbon in 2021"
    # Each is a unit vector, and the two spaces disagree: no shared neighbours by accident.
    assert float(np.linalg.norm(b.embed_one(text))) == pytest.approx(1.0, abs=1e-6)
    assert float(plain.embed_one(text) @ b.embed_one(text)) < 0.5
    assert np.array_equal(b.embed_one(text), HashEmbedder(model=MODEL_B).embed_one(text))
    built = build_embedder(Settings(embed_provider="hash", embed_model=MODEL_B))
    assert built.name == b.name


def test_the_local_model_is_named_by_the_model_not_by_the_alias_or_path(tmp_path: Any) -> None:
    assert local_model_label(None) == LOCAL_MODEL_NAME
    assert local_model_label(f"sentence-transformers/{LOCAL_MODEL_NAME}") == LOCAL_MODEL_NAME
    model_dir = tmp_path / "models" / "bge-small-en-v1.5"
    model_dir.mkdir(parents=True)
    assert local_model_label(str(model_dir)) == "bge-small-en-v1.5"
    assert local_model_label(str(model_dir) + "/") == "bge-small-en-v1.5"


async def test_the_first_write_records_the_project_model(
    client: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    assert await embedding_model.get_model(conn, PROJECT) is None
    await write_facts(client, key, ["Alice likes green tea"])
    assert await embedding_model.get_model(conn, PROJECT) == "hash"
    # An event write of another project records that one's model, apart.
    assert await embedding_model.get_model(conn, "proj-b") is None


async def test_a_context_call_with_another_model_is_refused_and_serves_nothing(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    await write_facts(client, key, ["Alice likes green tea"])
    before = await load_test_queries().test_context_call_count(conn, project_id=PROJECT)
    r = await post_context(client_b, key, "what does Alice drink?")
    body = assert_error(r, 409, "embedding_model_mismatch")
    assert body["details"] == {
        "project_id": PROJECT,
        "project_model": "hash",
        "server_model": f"hash:{MODEL_B}",
        "fix": f"haki reembed --project {PROJECT}",
    }
    assert "haki reembed --project" in body["message"]
    # Nothing served, nothing traced.
    assert await load_test_queries().test_context_call_count(conn, project_id=PROJECT) == before
    # The project's own model still serves it.
    packet = await context(client, key, "what does Alice drink?")
    assert [f["content"] for f in packet["facts"]] == ["Alice likes green tea"]


async def test_a_write_with_another_model_is_refused_and_writes_nothing(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    await write_facts(client, key, ["Alice likes green tea"])
    vectors = load_test_queries().test_project_vectors
    before = [r["item_id"] async for r in vectors(conn, project_id=PROJECT)]
    assert_error(await post_facts(client_b, key, ["Bob likes coffee"]), 409, "embedding_model_mismatch")
    events = [("Bob ordered coffee", "2024-03-01T09:30:00Z")]
    assert_error(await post_events(client_b, key, events), 409, "embedding_model_mismatch")
    assert [r["item_id"] async for r in vectors(conn, project_id=PROJECT)] == before


async def test_a_refused_write_costs_no_embedding_and_a_replay_is_still_answered(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient, key: str, embedder_b: CountingEmbedder
) -> None:
    body = {"project_id": PROJECT, "subject_id": "u1", "facts": [{"content": "Alice likes green tea"}]}
    first = await client.post("/v1/facts", json=body, headers={**bearer(key), "Idempotency-Key": "k-1"})
    assert first.status_code == 201
    before = embedder_b.written
    assert_error(await post_facts(client_b, key, ["Bob likes coffee"] * 50), 409, "embedding_model_mismatch")
    events = [("Bob ordered coffee", "2024-03-01T09:30:00Z")] * 50
    assert_error(await post_events(client_b, key, events), 409, "embedding_model_mismatch")
    assert embedder_b.written == before  # refused before the provider was called
    # The record of a write made under the project's model answers a retry on any server.
    again = await client_b.post("/v1/facts", json=body, headers={**bearer(key), "Idempotency-Key": "k-1"})
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()


async def test_a_project_without_a_record_is_served_and_recorded_by_its_next_write(
    client_b: httpx.AsyncClient, key: str, conn: asyncpg.Connection
) -> None:
    """Projects written before the record existed: no refusal; the next write records its model."""
    packet = await context(client_b, key, "anything")
    assert packet["facts"] == []
    await write_facts(client_b, key, ["Alice likes green tea"])
    assert await embedding_model.get_model(conn, PROJECT) == f"hash:{MODEL_B}"


async def test_the_check_rides_on_the_call_terms_statement(conn: asyncpg.Connection) -> None:
    """The context call pays no round trip for the check: the statement that sets its terms reads
    the project's model too."""
    async with conn.transaction():
        await embedding_model.hold_model(conn, PROJECT, "hash")
    statements: list[str] = []

    def log(record: asyncpg.connection.LoggedQuery) -> None:
        statements.append(record.query)

    conn.add_query_logger(log)
    try:
        async with conn.transaction():
            await assembler.open_context_call(conn, PROJECT, "hash")
        with pytest.raises(EmbeddingModelMismatch) as refused:
            async with conn.transaction():
                await assembler.open_context_call(conn, PROJECT, f"hash:{MODEL_B}")
    finally:
        conn.remove_query_logger(log)
    assert len([s for s in statements if "project_embedding_models" in s]) == 2
    assert len([s for s in statements if "set_config" in s]) == 2
    assert refused.value.details is not None and refused.value.details["project_model"] == "hash"
