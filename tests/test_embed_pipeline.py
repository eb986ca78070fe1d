"""Writes over an OpenAI-compatible embedder: a big batch goes out as several bounded requests at
once, a failed request writes nothing, and `haki import` embeds the next batch while it stores one.

Against a real HTTP server in a thread (speaking the OpenAI embeddings protocol) and the real
database; docs/performance.md, "Writes over an OpenAI-compatible embedder".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec
import numpy as np
import pytest

from service.constants import EMBED_DIM, MAX_BATCH
from service.db import connect
from service.embedding.embedder import OpenAIEmbedder
from service.memory import importer
from service.repository import facts as facts_repo
from service.settings import Settings
from tests.helpers import json_of, list_all_facts, post_facts
from tests.helpers.app import make_client
from tests.helpers.sql import load_test_queries
from tests.helpers.stub_http import serve_posts


def vector_of(text: str) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    return [float(x) for x in np.random.default_rng(seed).standard_normal(EMBED_DIM)]


@dataclass
class EmbeddingsServer:
    """Answers POST /v1/embeddings as OpenAI does, `delay` seconds late; the `fail_at`-th
    request (1-based, in arrival order) is refused with 400, which the client does not retry."""

    delay: float = 0.0
    fail_at: int | None = None
    port: int = 0
    inputs: list[list[str]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, body: bytes) -> tuple[int, bytes]:
        payload = json.loads(body)
        with self.lock:
            self.inputs.append(payload["input"])
            arrival = len(self.inputs)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if arrival == self.fail_at:
                return 400, b'{"error": {"message": "refused"}}'
            time.sleep(self.delay)
            data = [
                {"object": "embedding", "index": i, "embedding": vector_of(text)}
                for i, text in enumerate(payload["input"])
            ]
            return 200, json.dumps({"object": "list", "data": data, "model": payload["model"]}).encode()
        finally:
            with self.lock:
                self.in_flight -= 1

    def texts(self) -> list[str]:
        with self.lock:
            return [t for request in self.inputs for t in request]


@pytest.fixture
def embeddings_server() -> Iterator[EmbeddingsServer]:
    fake = EmbeddingsServer()
    with serve_posts(lambda _path, _headers, body: fake.handle(body)) as port:
        fake.port = port
        yield fake


def openai_settings(settings: Settings, port: int) -> Settings:
    """The session's settings with the `openai` provider and every embedding setting at its default."""
    return msgspec.structs.replace(
        settings, embed_provider="openai", embed_base_url=f"http://127.0.0.1:{port}/v1"
    )


@pytest.fixture
async def openai_embedder(
    settings: Settings, embeddings_server: EmbeddingsServer
) -> AsyncIterator[OpenAIEmbedder]:
    embedder = OpenAIEmbedder(openai_settings(settings, embeddings_server.port))
    try:
        yield embedder
    finally:
        await embedder.aclose()


@pytest.fixture
async def openai_client(
    settings: Settings, conn: asyncpg.Connection, openai_embedder: OpenAIEmbedder
) -> AsyncIterator[httpx.AsyncClient]:
    """A client on an app of its own whose embedder is `openai_embedder`."""
    async with make_client(settings, conn, openai_embedder) as client:
        yield client


# --- POST /v1/facts -----------------------------------------------------------------------------


async def test_a_full_batch_goes_out_as_bounded_requests_at_once(
    embeddings_server: EmbeddingsServer, openai_embedder: OpenAIEmbedder
) -> None:
    defaults = Settings()
    embeddings_server.delay = 0.05  # long enough for the requests to overlap
    texts = [f"fact {i} of a full batch" for i in range(MAX_BATCH)]
    vectors = await openai_embedder.embed(texts, purpose="write", project="p")
    sizes = [len(request) for request in embeddings_server.inputs]
    assert len(sizes) == -(-MAX_BATCH // defaults.embed_batch_size)
    assert max(sizes) <= defaults.embed_batch_size
    assert sorted(embeddings_server.texts()) == sorted(texts)  # each text sent once
    assert embeddings_server.max_in_flight == defaults.embed_concurrency
    # Each text gets its own vector, whatever order the requests came back in.
    for text, vec in zip(texts, vectors, strict=True):
        expected = np.asarray(vector_of(text))
        np.testing.assert_allclose(vec, expected / np.linalg.norm(expected), atol=1e-5)


async def test_a_write_is_stored_once_all_its_requests_came_back(
    key: str, embeddings_server: EmbeddingsServer, openai_client: httpx.AsyncClient
) -> None:
    defaults = Settings()
    embeddings_server.delay = 0.05
    # Four requests' worth (a thousand facts cost seconds of HNSW inserts on a busy machine).
    contents = [f"fact {i} of a write" for i in range(4 * defaults.embed_batch_size)]
    r = await post_facts(openai_client, key, contents, subject_id="pipeline")
    ids = [f["fact_id"] for f in json_of(r, 201)["facts"]]
    listed = await list_all_facts(openai_client, key, subject_id="pipeline")
    assert len(embeddings_server.inputs) == 4
    assert embeddings_server.max_in_flight == 4
    # Every fact stored, in input order, by one transaction after all the vectors came back.
    by_id = {f["fact_id"]: f["content"] for f in listed}
    assert [by_id[i] for i in ids] == contents


async def test_a_request_failing_mid_batch_writes_nothing(
    key: str, embeddings_server: EmbeddingsServer, openai_client: httpx.AsyncClient
) -> None:
    embeddings_server.delay = 0.05
    embeddings_server.fail_at = 6
    contents = [f"doomed fact {i}" for i in range(MAX_BATCH)]  # 16 requests; the sixth fails
    r = await post_facts(openai_client, key, contents, subject_id="doomed")
    assert r.status_code == 503, r.text
    assert r.json()["code"] == "unavailable"
    # The provider's address (and any credentials in it) stays in the server's log.
    assert f":{embeddings_server.port}" not in r.text and "127.0.0.1" not in r.text, r.text
    assert await list_all_facts(openai_client, key, subject_id="doomed") == []
    # The failure stops the batch: its requests not yet sent are never sent.
    assert len(embeddings_server.inputs) < -(-MAX_BATCH // Settings().embed_batch_size)


# --- haki import --------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


async def eventually(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return False


@contextlib.asynccontextmanager
async def key_held(settings: Settings, project: str, key: str) -> AsyncIterator[None]:
    """Holds the write lock of `key` in the scope (project, "s") until the block ends: a batch
    writing that key waits, the others go on."""
    holder = await connect(settings)
    try:
        async with holder.transaction():
            await facts_repo.lock_fact_keys(holder, project, "s", [key])
            yield
    finally:
        await holder.close()


async def facts_of(settings: Settings, project: str) -> int:
    """The facts committed in the scope (project, "s")."""
    conn = await connect(settings)
    try:
        row = await load_test_queries().test_import_counts(conn, project_id=project, subject_id="s")
        return int(row["facts"])
    finally:
        await conn.close()


def saved_progress(path: Path) -> importer.ImportProgress | None:
    progress_file = importer.progress_path(path)
    if not progress_file.exists():
        return None
    return msgspec.json.decode(progress_file.read_bytes(), type=importer.ImportProgress)


def lose_records_after_line_4(path: Path, done: importer.ImportProgress) -> None:
    """Puts back the progress file of a finished import as it was once its first batch (lines 1-4,
    four written) had committed: what a hard kill between later COMMITs and their records leaves."""
    first_batch = sum(len(line) for line in path.read_bytes().splitlines(keepends=True)[:4])
    lost = msgspec.structs.replace(done, offset=first_batch, line=4, written=4, done=False)
    importer.progress_path(path).write_bytes(msgspec.json.encode(lost))


async def test_the_import_embeds_the_next_batch_while_it_stores_one(
    settings: Settings, migrated: str, embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    project = f"pipe-{uuid.uuid4().hex[:12]}"
    # Three batches of four, one stored at a time; the first batch's facts carry a key whose lock
    # the test holds, so its transaction waits, and only an import that works ahead asks for the
    # second's vectors.
    rows = [{"content": f"line {n}", **({"key": "held"} if n < 4 else {})} for n in range(12)]
    path = write_jsonl(tmp_path / "facts.jsonl", rows)
    opts = importer.ImportOptions(
        path=path, project_id=project, subject_id="s", batch_size=4, show_progress=False, concurrency=1
    )
    async with key_held(settings, project, "held"):
        run = asyncio.ensure_future(
            importer.run_import(openai_settings(settings, embeddings_server.port), opts)
        )
        second_asked = await eventually(lambda: "line 4" in embeddings_server.texts())
        committed = await facts_of(settings, project)
    assert second_asked, "the second batch was not embedded while the first one was stored"
    assert committed == 0  # the first batch was still waiting for its lock
    assert await asyncio.wait_for(run, 30) == importer.Exit.OK
    assert await facts_of(settings, project) == 12
    # One batch ahead, no more: the third batch's vectors were asked for after the first's store.
    texts = embeddings_server.texts()
    assert texts.count("line 0") == texts.count("line 8") == 1
    saved = saved_progress(path)
    assert saved is not None and (saved.done, saved.written, saved.line) == (True, 12, 12)


async def test_the_import_stores_batches_at_once_and_records_each_commit(
    settings: Settings, migrated: str, embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    project = f"pipe-{uuid.uuid4().hex[:12]}"
    # Four batches of four, two stored at once. The second one waits for a key lock the test
    # holds; the others commit meanwhile, and the progress file keeps the last two as spans beyond
    # line 4. (Not the first batch: it records the new project's model, which the others await.)
    rows = [{"content": f"line {n}", **({"key": "held"} if 4 <= n < 8 else {})} for n in range(16)]
    path = write_jsonl(tmp_path / "facts.jsonl", rows)
    opts = importer.ImportOptions(
        path=path, project_id=project, subject_id="s", batch_size=4, show_progress=False, concurrency=2
    )

    def two_ahead() -> bool:
        progress = saved_progress(path)
        return progress is not None and len(progress.committed_ahead) == 2

    async with key_held(settings, project, "held"):
        run = asyncio.ensure_future(
            importer.run_import(openai_settings(settings, embeddings_server.port), opts)
        )
        ahead_done = await eventually(two_ahead)
        committed = await facts_of(settings, project)
        during = saved_progress(path)
    assert ahead_done, f"the batches after the held one did not commit meanwhile: {during}"
    assert committed == 12
    assert during is not None and (during.line, during.written, during.done) == (4, 12, False)
    assert [(s.start_line, s.end_line) for s in during.committed_ahead] == [(8, 12), (12, 16)]
    assert await asyncio.wait_for(run, 30) == importer.Exit.OK
    assert await facts_of(settings, project) == 16
    final = saved_progress(path)
    assert final is not None
    assert (final.done, final.written, final.line, final.committed_ahead) == (True, 16, 16, [])


async def test_a_line_the_store_refuses_keeps_the_others_vectors(
    settings: Settings, migrated: str, embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    project = f"pipe-{uuid.uuid4().hex[:12]}"
    rows: list[dict[str, Any]] = [{"content": f"kept {n}"} for n in range(5)]
    rows[2] = {"content": "supersedes nothing", "supersedes": str(uuid.uuid4())}
    path = write_jsonl(tmp_path / "facts.jsonl", rows)
    opts = importer.ImportOptions(path=path, project_id=project, subject_id="s", show_progress=False)
    status = await importer.run_import(openai_settings(settings, embeddings_server.port), opts)
    assert status == importer.Exit.REJECTED
    saved = saved_progress(path)
    assert saved is not None and saved.written == 4
    assert [r.line for r in saved.rejected] == [3]
    # Each line embedded once (and the start-up probe): the refused line was dropped from the
    # embedded batch, not the batch embedded again.
    texts = embeddings_server.texts()
    assert sorted(t for t in texts if t.startswith(("kept", "supersedes"))) == sorted(
        r["content"] for r in rows
    )


async def test_a_batch_committed_without_its_record_is_not_written_again(
    settings: Settings, migrated: str, embeddings_server: EmbeddingsServer, tmp_path: Path
) -> None:
    # A hard kill between a batch's COMMIT and the progress write loses only the record. Played
    # here by putting back the progress file as it was after the first batch: the resumed import
    # reads lines 5-12 again, and their batches are answered from their Idempotency-Key records.
    project = f"pipe-{uuid.uuid4().hex[:12]}"
    rows = [{"content": f"line {n}"} for n in range(12)]
    path = write_jsonl(tmp_path / "facts.jsonl", rows)
    opts = importer.ImportOptions(
        path=path, project_id=project, subject_id="s", batch_size=4, show_progress=False, concurrency=1
    )
    over_openai = openai_settings(settings, embeddings_server.port)
    assert await importer.run_import(over_openai, opts) == importer.Exit.OK
    done = saved_progress(path)
    assert done is not None and done.run_id is not None and done.written == 12
    lose_records_after_line_4(path, done)

    assert await importer.run_import(over_openai, opts) == importer.Exit.OK
    assert await facts_of(settings, project) == 12
    resumed = saved_progress(path)
    assert resumed is not None and (resumed.done, resumed.written, resumed.run_id) == (True, 12, done.run_id)
    assert resumed.replayed == 8  # lines 5-12, answered from their records

    # --restart is a new run: its keys are new, and every line is written again.
    restarted = dataclasses.replace(opts, restart=True)
    assert await importer.run_import(over_openai, restarted) == importer.Exit.OK
    assert await facts_of(settings, project) == 24
    again = saved_progress(path)
    assert again is not None and again.run_id not in (None, done.run_id) and again.replayed == 0


async def test_a_batch_committed_with_other_lines_stops_the_resumed_import(
    settings: Settings,
    migrated: str,
    embeddings_server: EmbeddingsServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The same lost record, but the file changed meanwhile: the second batch's key was committed
    # with other content, which the import says instead of writing or asking to resume again.
    project = f"pipe-{uuid.uuid4().hex[:12]}"
    path = write_jsonl(tmp_path / "facts.jsonl", [{"content": f"line {n}"} for n in range(8)])
    opts = importer.ImportOptions(
        path=path, project_id=project, subject_id="s", batch_size=4, show_progress=False, concurrency=1
    )
    over_openai = openai_settings(settings, embeddings_server.port)
    assert await importer.run_import(over_openai, opts) == importer.Exit.OK
    done = saved_progress(path)
    assert done is not None
    lose_records_after_line_4(path, done)
    write_jsonl(path, [{"content": f"line {n}" if n != 5 else "line five"} for n in range(8)])
    capsys.readouterr()

    assert await importer.run_import(over_openai, opts) == importer.Exit.REJECTED
    err = capsys.readouterr().err
    assert "lines 5-8" in err and "other content" in err and "--restart" in err, err
    assert "run the same command to resume" not in err
    assert await facts_of(settings, project) == 8
