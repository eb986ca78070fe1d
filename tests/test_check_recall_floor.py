"""scripts/check_recall_floor.py on tiny synthetic labelled sets, with the hash embedder."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from service.embedding.embedder import HashEmbedder
from tests.helpers import load_file_module
from tests.helpers.server import run_python, succeeded

pytestmark = pytest.mark.integration


REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "scripts" / "check_recall_floor.py"

LABELLED: list[dict[str, Any]] = [
    {
        "query": "green tea",
        "relevant": ["she drinks green tea", "green tea every morning"],
        "irrelevant": ["the car is red", "stock markets fell sharply", "a dog barked at night"],
    },
    {
        "query": "marathon training",
        "relevant": ["marathon training plan for spring"],
        "irrelevant": ["the car is red", "he paints watercolour landscapes"],
    },
    {
        "query": "piano lessons",
        "relevant": ["piano lessons on tuesday", "her piano teacher"],
        "irrelevant": ["stock markets fell sharply", "the bakery opens at six"],
    },
]


def load_script() -> ModuleType:
    return load_file_module("check_recall_floor", SCRIPT)


def run_script(tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "HAKI_EMBED_PROVIDER": "hash"}
    return succeeded(run_python([str(SCRIPT), *args], cwd=tmp_path, env=env))


def hash_distances(query: str, texts: list[str]) -> list[float]:
    emb = HashEmbedder()
    q = emb.embed_one(query).astype(np.float64)
    return [1.0 - float(np.dot(q, emb.embed_one(t).astype(np.float64))) for t in texts]


def test_labelled_file_prints_distribution_table_and_recommendation(tmp_path: Path) -> None:
    path = tmp_path / "labelled.json"
    path.write_text(json.dumps(LABELLED), encoding="utf-8")

    out = run_script(tmp_path, "--labelled", str(path))

    assert "embedder: hash (hash)" in out
    assert "labelled set: labelled.json (3 queries)" in out
    n_rel = sum(len(e["relevant"]) for e in LABELLED)
    n_irr = sum(len(e["irrelevant"]) for e in LABELLED)
    assert f"pairs: {n_rel} relevant, {n_irr} irrelevant, over 3 queries" in out
    assert re.search(r"^relevant(\s+\d\.\d{3}){9}$", out, re.M)
    assert re.search(r"^irrelevant(\s+\d\.\d{3}){9}$", out, re.M)
    assert "threshold  relevant kept  irrelevant gated" in out
    rows = re.findall(r"^\s+(\d\.\d\d)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%$", out, re.M)
    assert [float(r[0]) for r in rows] == [round(0.05 * i, 2) for i in range(1, 25)]

    # The same numbers, computed here from the hash embedder directly.
    rel = np.array([d for e in LABELLED for d in hash_distances(e["query"], e["relevant"])])
    irr = np.array([d for e in LABELLED for d in hash_distances(e["query"], e["irrelevant"])])
    for t, kept, gated, _ in rows:
        assert float(kept) == round(100 * float(np.mean(rel <= float(t))), 1)
        assert float(gated) == round(100 * float(np.mean(irr > float(t))), 1)
    expected = next(t for t in (round(0.05 * i, 2) for i in range(1, 25)) if np.mean(rel <= t) >= 0.95)
    assert f"recommended: HAKI_RECALL_MAX_DISTANCE={expected:.2f} for hash" in out
    # Related texts sit below the recommendation, unrelated ones above: the set separates.
    assert rel.max() <= expected < irr.min()
    # It only prints.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labelled.json"]


def test_min_recall_option_moves_the_recommendation(tmp_path: Path) -> None:
    path = tmp_path / "labelled.json"
    path.write_text(json.dumps(LABELLED), encoding="utf-8")
    strict = run_script(tmp_path, "--labelled", str(path), "--min-recall", "1.0", "--step", "0.01")
    loose = run_script(tmp_path, "--labelled", str(path), "--min-recall", "0.2", "--step", "0.01")
    pick = re.compile(r"HAKI_RECALL_MAX_DISTANCE=(\d\.\d\d)")
    strict_m, loose_m = pick.search(strict), pick.search(loose)
    assert strict_m and loose_m
    assert float(loose_m[1]) < float(strict_m[1])


def _locomo_sample() -> list[dict[str, Any]]:
    return [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Ben",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Rex."},
                    {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice! I started learning the violin."},
                    {
                        "speaker": "Ann",
                        "dia_id": "D1:3",
                        "text": "Look at this.",
                        "blip_caption": "a puppy on a sofa",
                        "img_url": ["http://example.invalid/x.jpg"],
                    },
                ],
                "session_2_date_time": "2:00 pm on 9 May, 2023",
                "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "My violin teacher is strict."}],
                "session_3_date_time": "2:00 pm on 10 May, 2023",  # no session: ignored
            },
            "qa": [
                {
                    "question": "What is the puppy's name?",
                    "answer": "Rex",
                    "evidence": ["D:1:1"],
                    "category": 4,
                },
                {
                    "question": "What does Ben learn?",
                    "answer": "violin",
                    "evidence": ["D1:02; D2:1"],
                    "category": 1,
                },
                {"question": "Unanswerable?", "adversarial_answer": "x", "evidence": ["D1:3"], "category": 5},
                {"question": "No evidence", "answer": "x", "evidence": [], "category": 3},
                {"question": "Dangling", "answer": "x", "evidence": ["D9:9", "D"], "category": 2},
            ],
        }
    ]


def test_locomo_loader_normalises_evidence_and_embeds_turns_once(tmp_path: Path) -> None:
    mod = load_script()
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(_locomo_sample()), encoding="utf-8")

    data = mod.load_locomo(path, limit=0, seed=0, categories=(1, 2, 3, 4))
    assert data.texts == [
        "Ann: I adopted a puppy named Rex.",
        "Ben: Nice! I started learning the violin.",
        "Ann: Look at this. [shares a photo: a puppy on a sofa]",
        "Ben: My violin teacher is strict.",
    ]
    by_query = {item.query: item for item in data.items}
    # Category 5 is left out by default; no evidence / dangling evidence leaves nothing to label.
    assert set(by_query) == {"What is the puppy's name?", "What does Ben learn?"}
    assert by_query["What is the puppy's name?"].relevant == [0]
    assert by_query["What is the puppy's name?"].irrelevant == [1, 2, 3]
    assert by_query["What does Ben learn?"].relevant == [1, 3]
    assert by_query["What does Ben learn?"].irrelevant == [0, 2]
    assert mod.normalise_dia_ids("D9:1 D4:4,D30:05") == ["D9:1", "D4:4", "D30:5"]

    with_adversarial = mod.load_locomo(path, limit=0, seed=0, categories=(1, 2, 3, 4, 5))
    assert len(with_adversarial.items) == 3
    assert len(mod.load_locomo(path, limit=1, seed=0, categories=(1, 2, 3, 4)).items) == 1

    out = run_script(tmp_path, "--dataset", str(path), "--limit", "0")
    assert "labelled set: locomo.json (2 of 2 QA items with evidence)" in out
    assert "pairs: 3 relevant, 5 irrelevant, over 2 queries" in out
    assert "recommended: HAKI_RECALL_MAX_DISTANCE=" in out
