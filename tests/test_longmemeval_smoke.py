"""The LongMemEval harness (benchmarks/longmemeval.py, docs/longmemeval.md).

The parser and the stratified sample run on a tiny inline fixture in the official format (made up
here, not real data). The smoke test runs 2 real questions with the real all-MiniLM-L6-v2 model on
a throw-away embedded PostgreSQL; the dataset is never copied here, so without it the test skips.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from service.constants import MAX_CONTENT_CHARS
from tests.helpers import load_file_module

ROOT = Path(__file__).resolve().parents[1]
# A directory of {n_sessions}_{question_id}.json files, or the official JSON array.
DATASET = Path(
    os.environ.get("HAKI_LONGMEMEVAL", ROOT.parent / "shared" / "datasets" / "longmemeval_s_cleaned.json")
)


def load_harness() -> ModuleType:
    return load_file_module("longmemeval_harness", ROOT / "benchmarks" / "longmemeval.py")


def fixture_question(qid: str, qtype: str) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": "Which city did I move to?",
        "answer": "Lisbon",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/22 (Mon) 23:59", "2023/05/20 (Sat) 02:21"],
        "haystack_session_ids": ["noise_1", "answer_a", "noise_1"],
        "haystack_sessions": [
            [{"role": "user", "content": "Tell me about tea."}, {"role": "assistant", "content": "x" * 9000}],
            [
                {"role": "user", "content": "I just moved to Lisbon.", "has_answer": True},
                {"role": "assistant", "content": "Welcome to Lisbon!", "has_answer": False},
            ],
            [{"role": "user", "content": "Tell me about tea."}, {"role": "assistant", "content": "x" * 9000}],
        ],
        "answer_session_ids": ["answer_a"],
    }


def test_parser_and_sample(tmp_path: Path) -> None:
    h = load_harness()
    q = h.parse_question(fixture_question("q1", "single-session-user"))
    assert len(q.turns) == 6
    assert [t.key for t in q.turns][:3] == ["0:0", "0:1", "1:0"]
    assert q.evidence == ("1:0",)
    assert q.answer_sessions == ("answer_a",)
    assert q.turns[2].content == "user: I just moved to Lisbon."
    assert q.turns[3].occurred_at == datetime(2023, 5, 23, 0, 0, tzinfo=UTC)  # 23:59 + 1 minute
    assert q.question_date == datetime(2023, 6, 1, 10, 0, tzinfo=UTC)
    assert q.truncated == 2 and len(q.turns[1].content) == MAX_CONTENT_CHARS

    # Coverage: the turn of the repeated distractor session counts as its own turn.
    assert h.score(q, {"1:0"}) == (1.0, 1.0, True)
    assert h.score(q, {"1:1", "2:0"}) == (0.0, 1.0, False)
    assert h.score(q, set()) == (0.0, 0.0, False)

    # Both inputs: a JSON array and a directory whose file names give the split.
    types = ["single-session-user", "multi-session", "temporal-reasoning"]
    raws = [fixture_question(f"q{i}{t[:2]}", t) for i, t in enumerate(types * 3)]
    raws.append(fixture_question("q9_abs", "multi-session"))
    array = tmp_path / "lme.json"
    array.write_text(json.dumps(raws))
    folder = tmp_path / "files"
    folder.mkdir()
    for raw in raws:
        (folder / f"40_{raw['question_id']}.json").write_text(json.dumps(raw))
    (folder / "3_oracle1.json").write_text(json.dumps(fixture_question("oracle1", "multi-session")))

    from_array = h.list_entries(array)
    from_dir = h.list_entries(folder, "s")
    assert [e.question_id for e in from_array] == [e.question_id for e in from_dir]
    assert len(from_dir) == 10
    assert [e.question_id for e in h.list_entries(folder, "oracle")] == ["oracle1"]

    # N // 6 a type in QUESTION_TYPES order, the first N % 6 types one more; abstention skipped.
    sample = h.stratified(from_dir, 8)  # quotas 2, 2, 1, 1, 1, 1
    assert [(e.question_type, e.question_id) for e in sample] == [
        ("single-session-user", "q0si"),
        ("single-session-user", "q3si"),
        ("multi-session", "q1mu"),
        ("temporal-reasoning", "q2te"),
    ]
    assert len(h.stratified(from_dir, None)) == 9
    assert len(h.load_questions(folder, "s", 6)) == 3


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(
    not DATASET.exists(),
    reason=f"LongMemEval not found at {DATASET} (set HAKI_LONGMEMEVAL to a file or directory)",
)
async def test_longmemeval_harness_smoke() -> None:
    h = load_harness()
    entries = h.stratified(h.list_entries(DATASET, "s"), 2)  # one single-session-user, one -assistant
    questions = [h.parse_question(e.load()) for e in entries]
    assert [q.question_type for q in questions] == ["single-session-user", "single-session-assistant"]
    for q in questions:
        assert q.evidence and q.answer_sessions and q.turns

    result = await h.evaluate(questions, h.select_modes(h.lme_modes(), ["unified hybrid"]), progress=False)

    (mode,) = result["modes"]
    assert mode["name"] == "unified" and mode["budget"] == 900
    assert result["questions"] == 2
    for summary in [mode["overall"], *mode["types"].values()]:
        if summary["n"]:
            for metric in ("turn_recall", "session_recall", "full_hit", "random_recall"):
                assert 0.0 <= summary[metric] <= 1.0, metric
            assert summary["full_hit"] <= summary["turn_recall"] + 1e-9
            assert 0 < summary["used_tokens"] <= 900
