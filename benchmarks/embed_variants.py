"""Query-embedding speed of the local model's backends, as ratios to torch fp32 in one run.

    .venv/bin/python benchmarks/embed_variants.py                 # 200 LoCoMo questions
    .venv/bin/python benchmarks/embed_variants.py --texts 100 --threads 1

For each backend of service/embedding/embedder.py (`torch`, `torch-int8`, `onnx`, `onnx-int8`, and `onnx`
with its int8 query graph, `onnx+int8-queries`; whichever can load here), embeds the same texts
one at a time (a query) and in batches of 8 and 64 (concurrent queries, a write), and reports p50
per single text, texts/s per batch, the share of a single call spent in the tokenizer, and the
cosine between each backend's vectors and torch fp32's on the same texts (what decides whether
fp32 vectors already stored stay comparable). Backends run
interleaved, round after round, so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from service.embedding.embedder import LOCAL_BACKENDS, LocalEmbedder  # noqa: E402
from service.settings import Settings  # noqa: E402

DATASET = REPO_ROOT.parent / "shared" / "datasets" / "locomo_dev.json"


# `onnx` whose queries run through the int8 query graph (service/embedding/onnx.py query_graph).
QUERY_INT8 = "onnx+int8-queries"


def questions(limit: int) -> list[str]:
    if DATASET.is_file():
        data = json.loads(DATASET.read_text(encoding="utf-8"))
        out = [qa["question"] for conv in data for qa in conv.get("qa", []) if qa.get("question")]
        out = list(dict.fromkeys(out))
        if len(out) >= limit:
            return out[:limit]
    return [f"What did person {i} say about the trip to city {i % 17} last week?" for i in range(limit)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=200)
    p.add_argument("--threads", type=int, default=1, help="HAKI_TORCH_THREADS for every backend")
    p.add_argument(
        "--backends",
        default=",".join([*LOCAL_BACKENDS, QUERY_INT8]),
        help=f"{QUERY_INT8}: `onnx` with HAKI_EMBED_QUERY_PRECISION=int8, its texts embedded as queries",
    )
    args = p.parse_args()
    texts = questions(args.texts)
    embedders: dict[str, LocalEmbedder] = {}
    for backend in args.backends.split(","):
        emb = LocalEmbedder(
            Settings(
                embed_provider="local",
                embed_backend="onnx" if backend == QUERY_INT8 else backend,
                embed_query_precision="int8" if backend == QUERY_INT8 else "fp32",
                torch_threads=args.threads,
            )
        )
        try:
            emb.load_sync()
        except Exception as exc:  # a backend whose optional extra is missing is skipped
            print(f"{backend}: skipped ({exc})")
            continue
        embedders[backend] = emb
    single: dict[str, list[float]] = {b: [] for b in embedders}
    tok: dict[str, list[float]] = {b: [] for b in embedders}
    vecs: dict[str, list[np.ndarray]] = {b: [] for b in embedders}
    for text in texts:
        for backend, emb in embedders.items():
            t0 = time.perf_counter()
            (v,) = emb.embed_sync([text], query=backend == QUERY_INT8)
            single[backend].append((time.perf_counter() - t0) * 1000)
            vecs[backend].append(v)
            t0 = time.perf_counter()
            emb.tokenize_only([text])
            tok[backend].append((time.perf_counter() - t0) * 1000)
    batch_rate: dict[str, dict[int, float]] = {b: {} for b in embedders}
    for size in (8, 64):
        for backend, emb in embedders.items():
            t0 = time.perf_counter()
            for start in range(0, len(texts), size):
                emb.embed_sync(texts[start : start + size], query=backend == QUERY_INT8)
            batch_rate[backend][size] = len(texts) / (time.perf_counter() - t0)
    ref = "torch" if "torch" in embedders else next(iter(embedders))
    ref_p50 = statistics.median(single[ref])
    print(f"{len(texts)} texts, {args.threads} thread(s); ratios against {ref}")
    print(
        "| backend | single p50 ms | ×ref | tokenizer p50 ms | batch 8 texts/s | batch 64 texts/s "
        "| cosine to fp32 min / mean |"
    )
    print("|---|---|---|---|---|---|---|")
    for backend in embedders:
        p50 = statistics.median(single[backend])
        cos = [float(np.dot(a, b)) for a, b in zip(vecs[backend], vecs[ref], strict=True)]
        print(
            f"| {backend} | {p50:.2f} | {p50 / ref_p50:.2f} | {statistics.median(tok[backend]):.2f} | "
            f"{batch_rate[backend][8]:.0f} | {batch_rate[backend][64]:.0f} | "
            f"{min(cos):.4f} / {statistics.mean(cos):.4f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
