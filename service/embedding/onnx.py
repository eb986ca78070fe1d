"""The local model through ONNX Runtime (optional extra `haki[onnx]`), exported offline from torch.

The graph is exported from the torch model already loaded (torch.onnx, TorchScript exporter) at
first load and cached under `<HAKI_DATA_DIR>/embed-cache/`, keyed by the model files' contents
and the library versions, so nothing is downloaded and a changed model is never served from a
stale file. A graph no process has loaded for STALE_GRAPH_SECONDS goes when another is written
(`prune`). `onnx-int8` is that graph with its MatMul weights dynamically quantised to int8 by
onnxruntime.quantization, one scale per tensor. The query graph (HAKI_EMBED_QUERY_PRECISION=int8)
is the same quantisation with one scale per output channel (and three layers kept fp32), used
for queries only, so the stored vectors stay fp32 (docs/performance.md, "Queries in int8").
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import logging
import os
import re
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger("haki.embedder")

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# Opset 17 has LayerNormalization as one node; ORT fuses the BERT attention from it.
OPSET = 17
# Part of the cache key: bump when the export itself changes.
EXPORT_VERSION = 2


def _cache_key(model_dir: Path, variant: str) -> str:
    import onnxruntime  # type: ignore[import-untyped]
    import torch

    h = hashlib.sha256()
    h.update(f"{variant}|{torch.__version__}|{onnxruntime.__version__}|{OPSET}|{EXPORT_VERSION}".encode())
    files = [(path, path.stat()) for path in sorted(model_dir.iterdir()) if path.is_file()]
    stamp = tuple((path.name, st.st_size, st.st_mtime_ns) for path, st in files)
    h.update(_model_digest(str(model_dir), stamp).encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _model_digest(model_dir: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    """The model files' contents, hashed once a process for each (name, size, mtime) stamp. By
    content: the modification times differ in every install of the same package, and keyed by
    them every fresh virtualenv exported its own 90 MB graph (45 copies, 4 GB, in one data dir)."""
    h = hashlib.sha256()
    for name, _size, _mtime in stamp:
        h.update(name.encode() + b"\0")
        with open(Path(model_dir) / name, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


# A cached graph that no process has loaded for this long is removed when a new graph is written
# in its directory. Every change of the cache key (a torch or onnxruntime upgrade, a new model
# file, EXPORT_VERSION) wrote three new graphs (fp32 90 MB, and the two int8 copies) beside the
# old ones, which stayed for ever. A process keeps its sessions in memory: a graph removed under
# a process that ran longer than this is exported again at its next start.
STALE_GRAPH_SECONDS = 7 * 24 * 3600


def _loaded(path: Path) -> Path:
    """`path`, marked as loaded now (its modification time), so that `prune` keeps it."""
    with contextlib.suppress(OSError):
        os.utime(path)
    return path


def prune(cache_dir: Path, model_name: str, now: float | None = None) -> list[Path]:
    """Removes the graphs of `model_name` in `cache_dir` not loaded for STALE_GRAPH_SECONDS, and
    unfinished writes (`.onnx.tmp`) as old; returns what it removed. Other models' graphs and
    any other file stay."""
    graph = re.compile(re.escape(model_name) + r"-[0-9a-f]{16}\.onnx")
    cutoff = (time.time() if now is None else now) - STALE_GRAPH_SECONDS
    removed: list[Path] = []
    for path in cache_dir.iterdir():
        if not (graph.fullmatch(path.name) or path.name.endswith(".onnx.tmp")):
            continue
        with contextlib.suppress(OSError):  # gone already, or not ours to remove
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
    if removed:
        log.info("removed %d cached graph(s) not loaded for %d days: %s", len(removed),
                 STALE_GRAPH_SECONDS // 86400, ", ".join(p.name for p in removed))  # fmt: skip
    return removed


def _written(path: Path, model_dir: Path) -> Path:
    """A graph just written, once the stale ones beside it are gone."""
    prune(path.parent, model_dir.name)
    return path


def _atomic(target: Path, write: Any) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def export(model: Any, tokenizer: Any, model_dir: Path, cache_dir: Path, *, int8: bool) -> Path:
    """The cached ONNX file of this model (fp32 or int8), exported now if missing."""
    import torch

    fp32 = cache_dir / f"{model_dir.name}-{_cache_key(model_dir, 'fp32')}.onnx"
    if fp32.exists():
        _loaded(fp32)
    else:

        class _LastHidden(torch.nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                out = self.inner(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                )
                return out.last_hidden_state

        # Two texts of different lengths: the trace then takes transformers' padded-mask path
        # (with one unpadded text it may bake in "no padding").
        sample = tokenizer(
            ["an example input for the export, padded", "a shorter one"], padding=True, return_tensors="pt"
        )
        if any(name not in sample for name in INPUT_NAMES):
            raise ValueError(f"the tokenizer does not give all of {INPUT_NAMES} (not a BERT-style model)")
        axes = {name: {0: "batch", 1: "seq"} for name in (*INPUT_NAMES, "last_hidden_state")}

        def write(path: Path) -> None:
            # The tracer's warnings (shapes traced as constants, an opset note) read as failures
            # on a first start; the graph is held to torch's vectors instead
            # (tests/test_embedder.py::test_onnx_backend_gives_the_torch_vectors).
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # A copy: tracing leaves the traced module changed (its padded batches came out
                # wrong afterwards, max error 5.6), and the caller keeps using `model`.
                torch.onnx.export(
                    _LastHidden(copy.deepcopy(model)),
                    tuple(sample[name] for name in INPUT_NAMES),
                    str(path),
                    input_names=list(INPUT_NAMES),
                    output_names=["last_hidden_state"],
                    dynamic_axes=axes,
                    opset_version=OPSET,
                    dynamo=False,
                )

        _atomic(fp32, write)
        _written(fp32, model_dir)
    if not int8:
        return fp32
    return _quantized(fp32, model_dir, cache_dir, "int8")


# The query graph keeps these MatMuls in fp32: the feed-forward output projections of the first
# three layers, the three whose int8 weights moved the vectors most (each alone 10-19 % of the
# cosine error, over 300 conversation turns); docs/performance.md, "Queries in int8".
QUERY_GRAPH_FP32_NODES = re.compile(r"/layer\.[012]/output/dense/MatMul$")


def query_graph(fp32: Path, model_dir: Path, cache_dir: Path) -> Path:
    """The cached query graph of the fp32 graph at `fp32`: its MatMul weights in int8 with a scale
    per output channel, but QUERY_GRAPH_FP32_NODES. Per tensor (`onnx-int8`), LoCoMo questions came
    out at cosine 0.945 (min) to their fp32 vectors; this graph gives 0.994, 2.1x faster."""
    return _quantized(fp32, model_dir, cache_dir, "int8-query", per_channel=True, keep=QUERY_GRAPH_FP32_NODES)


def _quantized(
    fp32: Path,
    model_dir: Path,
    cache_dir: Path,
    variant: str,
    *,
    per_channel: bool = False,
    keep: re.Pattern[str] | None = None,
) -> Path:
    """The cached copy of the fp32 graph with its MatMul weights in int8 (onnxruntime's dynamic
    quantisation), built now if missing; the MatMuls whose names `keep` matches stay fp32."""
    q8 = cache_dir / f"{model_dir.name}-{_cache_key(model_dir, variant)}.onnx"
    if q8.exists():
        return _loaded(q8)
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    nodes: list[str] = []
    if keep is not None:
        import onnx

        nodes = [n.name for n in onnx.load(str(fp32)).graph.node if keep.search(n.name)]

    def write(path: Path) -> None:
        quantize_dynamic(
            str(fp32), str(path), weight_type=QuantType.QInt8, per_channel=per_channel, nodes_to_exclude=nodes
        )

    with _quiet_quantizer():
        _atomic(q8, write)
    return _written(q8, model_dir)


class _QuantizerRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return f"onnxruntime{os.sep}quantization" not in record.pathname


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """onnxruntime.quantization logs on the root logger, about 35 lines a graph (a MatMul it
    skips, a tensor without parameters, advice to pre-process) into the service's log at start-up.
    A filter on the root logger drops those and nothing else: records of named loggers reach the
    root's handlers without passing its filters."""
    quiet = _QuantizerRecords()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


class OnnxRunner:
    """Two sessions on one graph: one intra-op thread for small inputs, `batch_threads` for batches
    (ORT fixes a session's thread count when it is created); with `query_path`, a third on that
    graph, one thread, for queries only."""

    def __init__(
        self, path: Path, *, query_threads: int, batch_threads: int, query_path: Path | None = None
    ) -> None:
        import onnxruntime as ort

        def session(threads: int, graph: Path = path) -> Any:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # Spinning workers burn the core PostgreSQL needs on a small machine.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            return ort.InferenceSession(str(graph), opts, providers=["CPUExecutionProvider"])

        self._small = session(query_threads)
        self._batch = self._small if batch_threads == query_threads else session(batch_threads)
        self._query = self._small if query_path is None else session(query_threads, query_path)

    def last_hidden(
        self, batch: dict[str, npt.NDArray[np.int64]], *, small: bool, query: bool = False
    ) -> npt.NDArray[np.float32]:
        sess = self._query if query else self._small if small else self._batch
        feeds = {name: batch[name].astype(np.int64, copy=False) for name in INPUT_NAMES}
        out: npt.NDArray[np.float32] = sess.run(["last_hidden_state"], feeds)[0]
        return out
