"""LongMemEval retrieval-quality harness for the Context Assembler (docs/longmemeval.md).

LongMemEval (Wu et al., ICLR 2025, arXiv:2410.10813; MIT licence) asks questions about a user's
long chat history with an assistant. The dataset is read at run time and never copied into this
repository. For each question the harness builds its haystack in a throw-away embedded PostgreSQL
through the public HTTP API, asks for a ContextPacket and measures how much of the evidence the
packet covers.

    .venv/bin/python benchmarks/longmemeval.py --dataset DIR --questions 12   # 2 per question type
    .venv/bin/python benchmarks/longmemeval.py --dataset longmemeval_s_cleaned.json --modes all

Input (`--dataset`): the official JSON array (`longmemeval_s_cleaned.json`, `longmemeval_oracle.json`)
or a directory of one JSON per question named `{n_sessions}_{question_id}.json`, of which `--split`
takes `s` (38 <= n < 400, the default), `oracle` (n <= 10) or `m` (n >= 400).

Ingest (project `longmemeval-eval`, one subject per question, named after its question_id):
- every turn of the haystack -> an event `"<role>: <content>"` (cut to the API's MAX_CONTENT_CHARS;
  the run reports how many were cut), dated at its chat session's haystack date (UTC) plus one
  minute per turn position, metadata `{"session_id": ..., "turn": i}`;
- no facts: LongMemEval has no observations.
Abstention questions (`_abs`) are skipped: they have no evidence to retrieve.

Measure: each question -> `run_context_call()` (the code behind POST /v1/context) per mode, without
`as_of` (every question_date is after its haystack's dates). A turn is covered when the packet
holds its episode. Per question type and overall:
- turn recall: share of the question's `has_answer` turns covered (mean over questions);
- session recall: share of its `answer_session_ids` with at least one turn covered (LongMemEval's
  own retrieval metric is recall over sessions and turns);
- full-evidence hit rate: share of questions whose `has_answer` turns are all covered;
- mean used tokens, mean turns served, p50 latency of `run_context_call()` (the query embedding is
  computed once per question before the modes run and timed apart, as in benchmarks/locomo.py);
- random: covered turns / turns of the haystack, the turn recall of a packet drawn uniformly.

Modes (`--modes`): `unified` and `facts_first` (docs/spec/context-profiles.md) with the shipped
weights at 900 tokens, and `<profile>@450`, `<profile>@1800`; default `unified hybrid,facts_first
hybrid` (both at 900). `--questions N` takes a fixed stratified sample: the first N/6 questions of
each question type in question_id order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.locomo import (  # noqa: E402  (the path above makes the package importable)
    HYBRID_ALIASES,
    PROFILES,
    Mode,
    _batches,
    covered_turns,
    fresh_service,
    machine,
    profile_modes,
    select_modes,
)
from service.constants import MAX_CONTENT_CHARS  # noqa: E402

DEFAULT_DATASET = REPO_ROOT.parent / "shared" / "datasets" / "longmemeval_s_cleaned.json"
PROJECT_ID = "longmemeval-eval"
TURN_STEP = timedelta(minutes=1)
DEFAULT_MODES = ("unified hybrid", "facts_first hybrid")
INGEST_BATCH = 250

# The paper's order: information extraction (three kinds), multi-session reasoning, knowledge
# updates, temporal reasoning; abstention is a suffix of the id, not a type.
QUESTION_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
SPLITS = ("s", "oracle", "m")

_DATE = re.compile(r"^\s*(\d{4}/\d{2}/\d{2})\s*\(\w+\)\s*(\d{1,2}:\d{2})\s*$")
_FILE_NAME = re.compile(r"^(\d+)_(.+)\.json$")
_HEAD_CHARS = 4096
_QUESTION_ID = re.compile(r'"question_id"\s*:\s*"((?:[^"\\]|\\.)*)"')
_QUESTION_TYPE = re.compile(r'"question_type"\s*:\s*"((?:[^"\\]|\\.)*)"')


# --- dataset -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    key: str  # "<chat session's position in the haystack>:<turn position>": ids repeat in a haystack
    session_id: str
    position: int  # 0-based position in its chat session
    content: str
    occurred_at: datetime
    has_answer: bool


@dataclass
class Question:
    question_id: str
    question_type: str
    question: str
    question_date: datetime
    turns: list[Turn]
    evidence: tuple[str, ...]  # keys of the has_answer turns
    answer_sessions: tuple[str, ...]
    truncated: int = 0  # turns cut to MAX_CONTENT_CHARS


def parse_date(raw: str) -> datetime:
    """`2023/05/20 (Sat) 02:21` -> 2023-05-20 02:21 UTC; the weekday is dropped, not trusted."""
    m = _DATE.match(raw)
    if not m:
        raise ValueError(f"not a LongMemEval date: {raw!r}")
    return datetime.strptime(f"{m[1]} {m[2]}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def is_abstention(question_id: str) -> bool:
    return question_id.endswith("_abs")


def parse_question(raw: dict[str, Any]) -> Question:
    dates = raw["haystack_dates"]
    ids = raw["haystack_session_ids"]
    sessions = raw["haystack_sessions"]
    if not len(dates) == len(ids) == len(sessions):
        raise ValueError(f"{raw['question_id']}: haystack dates, ids and sessions differ in length")
    turns: list[Turn] = []
    truncated = 0
    for n, (date, session_id, session) in enumerate(zip(dates, ids, sessions, strict=True)):
        start = parse_date(date)
        for pos, t in enumerate(session):
            content = f"{t['role']}: {t['content']}"
            if len(content) > MAX_CONTENT_CHARS:
                content = content[:MAX_CONTENT_CHARS]
                truncated += 1
            turns.append(
                Turn(
                    f"{n}:{pos}",
                    str(session_id),
                    pos,
                    content,
                    start + pos * TURN_STEP,
                    bool(t.get("has_answer", False)),
                )
            )
    return Question(
        question_id=str(raw["question_id"]),
        question_type=str(raw["question_type"]),
        question=str(raw["question"]),
        question_date=parse_date(raw["question_date"]),
        turns=turns,
        evidence=tuple(t.key for t in turns if t.has_answer),
        answer_sessions=tuple(dict.fromkeys(str(s) for s in raw["answer_session_ids"])),
        truncated=truncated,
    )


def split_of(n_sessions: int) -> str | None:
    if n_sessions <= 10:
        return "oracle"
    if 38 <= n_sessions < 400:
        return "s"
    return "m" if n_sessions >= 400 else None


@dataclass(frozen=True)
class Entry:
    """A question known by its id and type, its haystack read only when it is chosen."""

    question_id: str
    question_type: str
    load: Callable[[], dict[str, Any]]


def _read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def list_entries(path: Path, split: str = "s") -> list[Entry]:
    """Every question of the dataset (a JSON array, or a directory of per-question files whose
    name gives the split), in question_id order."""
    entries: list[Entry] = []
    if path.is_dir():
        for file in sorted(path.iterdir()):
            m = _FILE_NAME.match(file.name)
            if not m or split_of(int(m[1])) != split:
                continue
            qid, qtype = _head(file)
            entries.append(Entry(qid, qtype, _loader(file)))
    else:
        for raw in _read_json(path):
            entries.append(Entry(str(raw["question_id"]), str(raw["question_type"]), _constant(raw)))
    ids = [e.question_id for e in entries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: a question_id appears twice")
    return sorted(entries, key=lambda e: e.question_id)


def _head(file: Path) -> tuple[str, str]:
    """The question's id and type from the file's first bytes, where the official key order puts
    them: parsing every S haystack (264 MB) only to sample a few questions would take minutes."""
    with file.open(encoding="utf-8") as fh:
        head = fh.read(_HEAD_CHARS)
    qid, qtype = _QUESTION_ID.search(head), _QUESTION_TYPE.search(head)
    if qid and qtype:
        return json.loads(f'"{qid[1]}"'), json.loads(f'"{qtype[1]}"')
    raw = _read_json(file)
    return str(raw["question_id"]), str(raw["question_type"])


def _loader(file: Path) -> Callable[[], dict[str, Any]]:
    return lambda: dict(_read_json(file))


def _constant(raw: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    return lambda: raw


def stratified(entries: Sequence[Entry], n_questions: int | None) -> list[Entry]:
    """The non-abstention questions; with N, the first N // 6 of each type in question_id order,
    the first N % 6 types of QUESTION_TYPES taking one more (a type short of its quota gives what
    it has). Fixed, so runs on the same N are comparable."""
    kept = [e for e in entries if not is_abstention(e.question_id)]
    if n_questions is None:
        return kept
    base, extra = divmod(n_questions, len(QUESTION_TYPES))
    chosen: list[Entry] = []
    for i, qtype in enumerate(QUESTION_TYPES):
        quota = base + (1 if i < extra else 0)
        chosen += [e for e in kept if e.question_type == qtype][:quota]
    return chosen


def load_questions(path: Path, split: str = "s", n_questions: int | None = None) -> list[Question]:
    return [parse_question(e.load()) for e in stratified(list_entries(path, split), n_questions)]


# --- modes ---------------------------------------------------------------------------------------


def lme_modes() -> list[Mode]:
    """Each profile's shipped weights at 900, 450 and 1800 tokens (no single-signal modes)."""
    return [m for profile in PROFILES for m in profile_modes(profile) if m.weights is None]


# --- metrics -------------------------------------------------------------------------------------


@dataclass
class Sample:
    question_type: str
    turn_recall: float
    session_recall: float
    full: bool
    used_tokens: int
    turns_served: int
    latency_ms: float
    random_recall: float


@dataclass
class ModeStats:
    samples: list[Sample] = field(default_factory=list)

    def summary(self, question_type: str | None = None) -> dict[str, float]:
        rows = [s for s in self.samples if question_type is None or s.question_type == question_type]
        if not rows:
            return {"n": 0}
        return {
            "n": len(rows),
            "turn_recall": statistics.fmean(s.turn_recall for s in rows),
            "session_recall": statistics.fmean(s.session_recall for s in rows),
            "full_hit": statistics.fmean(1.0 if s.full else 0.0 for s in rows),
            "used_tokens": statistics.fmean(s.used_tokens for s in rows),
            "turns_served": statistics.fmean(s.turns_served for s in rows),
            "p50_ms": statistics.median(s.latency_ms for s in rows),
            "random_recall": statistics.fmean(s.random_recall for s in rows),
        }


def score(question: Question, covered: set[str]) -> tuple[float, float, bool]:
    """Turn recall, session recall and full-evidence hit of a packet covering these turn keys."""
    hits = sum(1 for k in question.evidence if k in covered)
    sessions_hit = {t.session_id for t in question.turns if t.key in covered}
    turn_recall = hits / len(question.evidence) if question.evidence else 0.0
    session_recall = (
        sum(1 for s in question.answer_sessions if s in sessions_hit) / len(question.answer_sessions)
        if question.answer_sessions
        else 0.0
    )
    return turn_recall, session_recall, bool(question.evidence) and hits == len(question.evidence)


# --- the run -------------------------------------------------------------------------------------


async def ingest(client: Any, headers: dict[str, str], question: Question) -> dict[str, UUID]:
    """Writes the haystack's turns as events through the HTTP API; returns turn key -> event id."""
    event_of_turn: dict[str, UUID] = {}
    for batch in _batches(question.turns, INGEST_BATCH):
        body = {
            "project_id": PROJECT_ID,
            "subject_id": question.question_id,
            "events": [
                {
                    "content": t.content,
                    "occurred_at": t.occurred_at.isoformat(),
                    "metadata": {"session_id": t.session_id, "turn": t.position},
                }
                for t in batch
            ],
        }
        r = await client.post("/v1/events", json=body, headers=headers)
        r.raise_for_status()
        for t, e in zip(batch, r.json()["events"], strict=True):
            event_of_turn[t.key] = UUID(e["event_id"])
    return event_of_turn


async def evaluate(
    questions: Iterable[Question],
    modes: list[Mode],
    embed_backend: Any = "torch",
    *,
    query_precision: Any = "fp32",
    progress: bool = True,
) -> dict[str, Any]:
    """Runs the evaluation on a fresh embedded PostgreSQL; returns the metrics."""
    from service.context.call import PROFILE_WEIGHTS, ContextCall
    from service.db.call_runner import run_context_call
    from service.memory import event_context
    from service.observability.timing import StageTimer
    from service.structs import ContextRequest

    def say(msg: str) -> None:
        if progress:
            print(msg, file=sys.stderr, flush=True)

    started = time.perf_counter()
    # httpx logs every request (tests share the process).
    async with fresh_service(
        "longmemeval",
        PROJECT_ID,
        embed_backend=embed_backend,
        query_precision=query_precision,
        quiet={"httpx": logging.WARNING},
        say=say,
        client_timeout=1800,
    ) as svc:
        embedder, client, headers = svc.embedder, svc.client, svc.headers
        stats: dict[str, ModeStats] = {m.name: ModeStats() for m in modes}
        embed_ms: list[float] = []
        ingest_s = 0.0
        turns = truncated = 0
        ids: list[str] = []
        for q in questions:
            t0 = time.perf_counter()
            event_of_turn = await ingest(client, headers, q)
            # The events' vectors in context (rule 8), as the serving process's background task.
            await event_context.drain(svc.pool, embedder)
            took = time.perf_counter() - t0
            ingest_s += took
            turns += len(q.turns)
            truncated += q.truncated
            ids.append(q.question_id)
            turn_of_event = {v: k for k, v in event_of_turn.items()}
            # One uncached embedding per question, timed; every mode then hits the cache.
            e0 = time.perf_counter()
            await embedder.embed([q.question], purpose="query")
            embed_ms.append((time.perf_counter() - e0) * 1000.0)
            line = []
            for mode in modes:
                req = ContextRequest(
                    project_id=PROJECT_ID,
                    subject_id=q.question_id,
                    query=q.question,
                    budget_tokens=mode.budget,
                    profile=mode.profile,
                )
                call = ContextCall.of(req, svc.settings)
                async with svc.pool.acquire() as conn:
                    a0 = time.perf_counter()
                    packet = await run_context_call(conn, embedder, call, timer=StageTimer())
                    latency = (time.perf_counter() - a0) * 1000.0
                assert packet.profile == mode.profile, (packet.profile, mode.name)
                covered = covered_turns(packet, turn_of_event)
                turn_recall, session_recall, full = score(q, covered)
                stats[mode.name].samples.append(
                    Sample(
                        question_type=q.question_type,
                        turn_recall=turn_recall,
                        session_recall=session_recall,
                        full=full,
                        used_tokens=packet.used_tokens,
                        turns_served=len(covered),
                        latency_ms=latency,
                        random_recall=len(covered) / len(q.turns),
                    )
                )
                line.append(f"{mode.name} {turn_recall:.2f}/{session_recall:.2f}")
            say(
                f"[longmemeval] {q.question_id} ({q.question_type}): {len(q.turns)} turns in "
                f"{took:.1f}s; turn/session recall " + ", ".join(line)
            )
        elapsed = time.perf_counter() - started
        return {
            "modes": [
                {
                    "name": m.name,
                    "profile": m.profile,
                    "budget": m.budget,
                    "weights": list(PROFILE_WEIGHTS[m.profile]),
                    "group": m.group,
                    "overall": stats[m.name].summary(),
                    "types": {t: stats[m.name].summary(t) for t in QUESTION_TYPES},
                }
                for m in modes
            ],
            "question_ids": ids,
            "questions": len(ids),
            "turns_ingested": turns,
            "turns_truncated": truncated,
            "ingest_seconds": ingest_s,
            "embed_p50_ms": statistics.median(embed_ms) if embed_ms else 0.0,
            "elapsed_seconds": elapsed,
        }


# --- report --------------------------------------------------------------------------------------


def _by_type(result: dict[str, Any], metric: str) -> list[str]:
    lines = [
        "| mode | budget | " + " | ".join(QUESTION_TYPES) + " | **overall** |",
        "|---|---:|" + "---:|" * (len(QUESTION_TYPES) + 1),
    ]
    for m in result["modes"]:
        cells = [f"{s[metric]:.3f}" if s["n"] else "–" for s in (m["types"][t] for t in QUESTION_TYPES)]
        o = m["overall"]
        total = f"**{o[metric]:.3f}**" if o["n"] else "–"
        lines.append(f"| {m['name']} | {m['budget']} | " + " | ".join(cells) + f" | {total} |")
    return lines


def markdown(result: dict[str, Any], command: str) -> str:
    counts = result["modes"][0]["types"] if result["modes"] else {}
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {machine()}  ",
        f"Run time: {result['elapsed_seconds']:.0f} s (ingest {result['turns_ingested']} turns in "
        f"{result['ingest_seconds']:.0f} s, {result['turns_truncated']} cut to {MAX_CONTENT_CHARS} "
        f"characters); {result['questions']} questions; query embedding p50 "
        f"{result['embed_p50_ms']:.1f} ms (not in the latencies below).  ",
        "Questions per type: " + ", ".join(f"{t} {counts[t]['n']}" for t in counts) + ".",
        "",
        "| mode | budget | turn recall | session recall | full-evidence hit | mean used tokens "
        "| mean turns served | p50 latency | random packet |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in result["modes"]:
        o = m["overall"]
        if not o["n"]:
            continue
        lines.append(
            f"| {m['name']} | {m['budget']} | **{o['turn_recall']:.3f}** | {o['session_recall']:.3f} | "
            f"{o['full_hit']:.3f} | {o['used_tokens']:.0f} | {o['turns_served']:.1f} | "
            f"{o['p50_ms']:.1f} ms | {o['random_recall']:.3f} |"
        )
    lines += ["", "Turn-level evidence recall per question type:", "", *_by_type(result, "turn_recall")]
    lines += ["", "Session-level recall per question type:", "", *_by_type(result, "session_recall")]
    lines += ["", "Full-evidence hit rate per question type:", "", *_by_type(result, "full_hit")]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--dataset",
        type=Path,
        default=DEFAULT_DATASET,
        help="the official JSON array, or a directory of {n_sessions}_{question_id}.json files\n"
        "(default: %(default)s)",
    )
    p.add_argument(
        "--split",
        default="s",
        choices=SPLITS,
        help="with a directory: which files by n_sessions: s 38..399, oracle <= 10, m >= 400\n"
        "(default: %(default)s; a JSON array is one split already)",
    )
    p.add_argument(
        "--questions",
        type=int,
        default=None,
        metavar="N",
        help="a fixed stratified sample: the first N/6 questions of each type by question_id",
    )
    p.add_argument(
        "--modes",
        default=",".join(DEFAULT_MODES),
        help="comma-separated mode names or groups: `unified`, `facts_first`, `all`\n"
        "(default: %(default)s); `<profile> hybrid` names a profile at 900 tokens; names:\n"
        + ", ".join(m.name for m in lme_modes()),
    )
    p.add_argument("--json", type=Path, default=None, help="also write the metrics as JSON here")
    p.add_argument(
        "--embed-backend",
        default="torch",
        choices=["torch", "torch-int8", "onnx", "onnx-int8"],
        help="HAKI_EMBED_BACKEND of the local model (default: %(default)s, the fp32 reference)",
    )
    p.add_argument(
        "--query-precision",
        default="fp32",
        choices=["fp32", "int8"],
        help="HAKI_EMBED_QUERY_PRECISION (the `onnx` backend's queries; default: %(default)s)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dataset.exists():
        print(
            f"dataset not found: {args.dataset}\n"
            "LongMemEval is not shipped with Haki: pass --dataset with longmemeval_s_cleaned.json\n"
            "or a directory of {n_sessions}_{question_id}.json files (docs/longmemeval.md).",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    modes = lme_modes()
    wanted = [n.strip() for n in args.modes.split(",") if n.strip()]
    if "all" not in wanted:
        unknown = set(wanted) - {m.name for m in modes} - {m.group for m in modes} - set(HYBRID_ALIASES)
        if unknown:
            print(f"unknown modes: {sorted(unknown)}; known: {[m.name for m in modes]}", file=sys.stderr)
            return 2
        modes = select_modes(modes, wanted)
    entries = stratified(list_entries(args.dataset, args.split), args.questions)
    if not entries:
        print(f"no questions in {args.dataset} (split {args.split})", file=sys.stderr)
        return 2
    # Parsed one at a time, as the run reaches them: an S haystack is about 500 long turns.
    questions = (parse_question(e.load()) for e in entries)
    result = asyncio.run(evaluate(questions, modes, args.embed_backend, query_precision=args.query_precision))
    command = "benchmarks/longmemeval.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    print(markdown(result, command.strip()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
