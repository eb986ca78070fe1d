"""The ONNX graph cache keeps what is loaded and drops what no process has loaded for a week.

Each change of the cache key (a library upgrade, a new model file) writes three new graphs of
about 140 MB in all; before `prune`, the old ones stayed for ever. No model runs here: the cache
is files, and `prune` only reads names and modification times.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from service.embedding import onnx
from service.embedding.onnx import STALE_GRAPH_SECONDS, prune

MODEL = "all-MiniLM-L6-v2"


def _file(path: Path, age_seconds: float, now: float) -> Path:
    path.write_bytes(b"graph")
    os.utime(path, (now - age_seconds, now - age_seconds))
    return path


def test_prune_removes_only_this_models_stale_graphs_and_old_unfinished_writes(tmp_path: Path) -> None:
    now = time.time()
    week = STALE_GRAPH_SECONDS
    stale = _file(tmp_path / f"{MODEL}-0123456789abcdef.onnx", week + 60, now)
    loaded = _file(tmp_path / f"{MODEL}-fedcba9876543210.onnx", week - 60, now)
    other_model = _file(tmp_path / "paraphrase-MiniLM-0123456789abcdef.onnx", week + 60, now)
    not_a_graph = _file(tmp_path / f"{MODEL}-notes.txt", week + 60, now)
    odd_name = _file(tmp_path / f"{MODEL}-0123456789ABCDEF.onnx", week + 60, now)  # not a key we write
    old_write = _file(tmp_path / "tmpa1b2c3.onnx.tmp", week + 60, now)
    running_write = _file(tmp_path / "tmpd4e5f6.onnx.tmp", 5, now)

    removed = prune(tmp_path, MODEL, now=now)

    assert sorted(removed) == sorted([stale, old_write])
    assert not stale.exists() and not old_write.exists()
    for kept in (loaded, other_model, not_a_graph, odd_name, running_write):
        assert kept.exists(), kept


def test_a_graph_loaded_from_the_cache_is_kept(tmp_path: Path) -> None:
    now = time.time()
    graph = _file(tmp_path / f"{MODEL}-0123456789abcdef.onnx", STALE_GRAPH_SECONDS + 60, now)
    assert onnx._loaded(graph) == graph  # what export() and the int8 copies do on a cache hit
    assert prune(tmp_path, MODEL) == []
    assert graph.exists()


def test_prune_of_an_empty_or_missing_entry_is_quiet(tmp_path: Path) -> None:
    assert prune(tmp_path, MODEL) == []
    assert onnx._loaded(tmp_path / "gone.onnx") == tmp_path / "gone.onnx"
