"""LoCoMo retrieval-quality harness for the Context Assembler (docs/quality.md).

Ingests LoCoMo conversations (Maharana et al., ACL 2024; CC BY-NC 4.0, internal evaluation only:
the dataset is read from ../shared at run time and never copied into this repository) into a
throw-away embedded PostgreSQL through the public HTTP API, then asks every question that has
evidence for a ContextPacket and measures how much of the evidence the packet covers.

    .venv/bin/python benchmarks/locomo.py                      # the dev half, every mode
    .venv/bin/python benchmarks/locomo.py --conversations 1 --questions 20   # a quick run

Ingest (one subject per conversation, project `locomo-eval`):
- every dialog turn -> an event `"Speaker: text"` (+ `" [shares a photo: <caption>]"`), dated at
  its session's date + one minute per turn, metadata `{"dia_id": ...}`;
- every `observation` -> a fact dated `valid_from` = its session's date, `source_event_id` = the
  event of the turn it links to (normalised as ../shared/datasets/SOURCE.md says; a fact whose
  link resolves to no turn gets no source_event_id).

Measure: each QA with evidence -> `run_context_call()` (the code behind POST /v1/context). A turn is
covered when the packet holds its episode, or a served fact whose `source_event_id` is its event.
- evidence recall: share of the QA's evidence turns covered (mean over QAs);
- full-evidence hit rate: share of QAs whose evidence turns are all covered;
- mean used tokens, p50 latency of `run_context_call()` (the query embedding is computed once per
  question before the modes run, timed separately as `embed p50`, so every mode is timed alike);
- random: the recall a packet covering as many distinct turns, drawn uniformly, would get in
  expectation (covered turns / turns of the conversation), the floor any retrieval must beat.

Modes (`--modes`, names or groups; default `all`): for each profile of
docs/spec/context-profiles.md, `unified` (the default) and `facts_first`, set as the ContextRequest's
`profile`:
- `<profile>`: the shipped weights at 900 tokens;
- `<profile> vector-only`: weights (1, 0, 0);
- `<profile> text-only`: weights (0, 1, 0) and the query never embedded, so the call takes
  its embedder-down path (full-text candidates only);
- `<profile>@450`, `<profile>@1800`: the shipped weights at 450 and 1800 tokens.
A group (`unified`, `facts_first`, `all`) selects all of its modes; `<profile> hybrid` selects
the hybrid mode alone (its name is the group's).
The single-signal modes are built here, with `ContextCall.of`'s evaluation-only `weights=` and an
embedder that is down; the service carries no such mode, and none is reachable through the
HTTP API.

`--embedder NAME` (evaluation only) swaps the service's local model for another 384-dimension
model of benchmarks/embed_models.py, for the writes and the queries alike; its package is
looked up on `--embed-path` (docs/embedding-models.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:
    from service.settings import ContextProfile

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_DATASET = REPO_ROOT.parent / "shared" / "datasets" / "locomo_dev.json"
PROJECT_ID = "locomo-eval"
SESSION_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
TURN_STEP = timedelta(minutes=1)

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_OBSERVATION_KEY = re.compile(r"^session_(\d+)_observation$")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")
_ID_SEPARATORS = re.compile(r"[;,\s]+")


# --- dataset -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    position: int  # 0-based position in its session
    content: str
    occurred_at: datetime


@dataclass(frozen=True)
class Observation:
    content: str
    session: int
    valid_from: datetime
    dia_ids: tuple[str, ...]  # normalised; may name turns that do not exist


@dataclass(frozen=True)
class Question:
    question: str
    category: int
    evidence: tuple[str, ...]  # normalised ids of existing turns, deduplicated, in order


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    observations: list[Observation]
    questions: list[Question]
    dropped_evidence: int = 0  # evidence ids that name no turn (SOURCE.md: 2 known)


def normalise_ids(raw: str) -> list[str]:
    """SOURCE.md: split on `;`, `,` and spaces, `D:` -> `D`, strip leading zeros; drop the rest."""
    out: list[str] = []
    for part in _ID_SEPARATORS.split(raw.strip()):
        m = _DIA_ID.match(part.replace("D:", "D"))
        if m:
            out.append(f"D{int(m[1])}:{int(m[2])}")
    return out


def parse_session_date(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), SESSION_DATE_FORMAT).replace(tzinfo=UTC)


def turn_content(turn: dict[str, Any]) -> str:
    content = f"{turn['speaker']}: {turn.get('text', '')}".strip()
    caption = (turn.get("blip_caption") or "").strip()
    if caption:
        content += f" [shares a photo: {caption}]"
    return content


def parse_conversation(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    sessions = sorted(int(m[1]) for k in conv if (m := _SESSION_KEY.match(k)))
    dates: dict[int, datetime] = {}
    turns: list[Turn] = []
    for n in sessions:
        date = dates[n] = parse_session_date(conv[f"session_{n}_date_time"])
        for pos, t in enumerate(conv[f"session_{n}"]):
            (dia_id,) = normalise_ids(t["dia_id"]) or [t["dia_id"]]
            turns.append(Turn(dia_id, n, pos, turn_content(t), date + pos * TURN_STEP))
    known = {t.dia_id for t in turns}

    observations: list[Observation] = []
    for key, by_speaker in sample.get("observation", {}).items():
        m = _OBSERVATION_KEY.match(key)
        if not m or int(m[1]) not in dates:
            continue
        n = int(m[1])
        for items in by_speaker.values():
            for item in items:
                text, link = item[0], item[1] if len(item) > 1 else ""
                links = link if isinstance(link, list) else [link]
                ids = tuple(i for raw in links for i in normalise_ids(str(raw)))
                observations.append(Observation(text, n, dates[n], ids))

    questions: list[Question] = []
    dropped = 0
    for qa in sample.get("qa", []):
        evidence = [i for raw in qa.get("evidence", []) for i in normalise_ids(str(raw))]
        resolved = list(dict.fromkeys(i for i in evidence if i in known))
        dropped += len(set(evidence) - known)
        if resolved:
            questions.append(Question(str(qa["question"]), int(qa["category"]), tuple(resolved)))
    return Conversation(sample["sample_id"], turns, observations, questions, dropped)


def load_dataset(path: Path) -> list[Conversation]:
    with path.open(encoding="utf-8") as fh:
        return [parse_conversation(s) for s in json.load(fh)]


# --- modes ---------------------------------------------------------------------------------------


PROFILES: tuple[ContextProfile, ...] = (
    "unified",
    "facts_first",
)  # docs/spec/context-profiles.md; `unified` is the default
VECTOR_ONLY = (1.0, 0.0, 0.0)
TEXT_ONLY = (0.0, 1.0, 0.0)


@dataclass(frozen=True)
class Mode:
    name: str
    profile: ContextProfile  # the ContextRequest's `profile`, one of PROFILES
    budget: int
    weights: tuple[float, float, float] | None  # None: the shipped weights
    note: str = ""
    # False: the query is never embedded, so the call takes its embedder-down path (full-text
    # candidates only, the packet `degraded`).
    query_vector: bool = True

    @property
    def group(self) -> str:
        return self.profile


def profile_modes(profile: ContextProfile) -> list[Mode]:
    """One profile's hybrid (the shipped weights), its two single signals, and two budgets."""
    return [
        Mode(profile, profile, 900, None, note="shipped weights"),
        Mode(f"{profile} vector-only", profile, 900, VECTOR_ONLY),
        Mode(
            f"{profile} text-only",
            profile,
            900,
            TEXT_ONLY,
            note="query never embedded: the embedder-down path",
            query_vector=False,
        ),
        Mode(f"{profile}@450", profile, 450, None),
        Mode(f"{profile}@1800", profile, 1800, None),
    ]


def default_modes() -> list[Mode]:
    """Every mode of every profile, `unified` (the default) first."""
    return [mode for profile in PROFILES for mode in profile_modes(profile)]


# A profile's hybrid is named after its profile, which is also its group's name.
HYBRID_ALIASES = {f"{profile} hybrid": profile for profile in PROFILES}


def select_modes(modes: Sequence[Mode], wanted: Sequence[str]) -> list[Mode]:
    """The modes named (`<profile> hybrid` for a hybrid alone) or in a group named."""
    names = {HYBRID_ALIASES.get(w, w) for w in wanted if w not in PROFILES}
    return [m for m in modes if m.group in wanted or m.name in names]


# --- metrics -------------------------------------------------------------------------------------


class _NoVector:
    """The project's embedder, down: the call degrades to full-text retrieval (spec rule 10). It
    bears the model's name, as the project's vectors are of that model."""

    dim = 384

    def __init__(self, name: str) -> None:
        self.name = name

    async def embed(self, texts: Sequence[str], **_: Any) -> list[Any]:
        raise RuntimeError("text-only mode: no query embedding")

    async def aclose(self) -> None:
        return None


# --event-context off: the events' vectors in context (docs/spec/context-profiles.md, rule 8) are
# not made, as with HAKI_EVENT_CONTEXT=false: `unified` ranks episodes by their own vectors alone.
EVENT_CONTEXTS = ("on", "off")


@dataclass
class Sample:
    category: int
    recall: float
    full: bool
    used_tokens: int
    latency_ms: float
    random_recall: float


@dataclass
class ModeStats:
    samples: list[Sample] = field(default_factory=list)

    def summary(self, category: int | None = None) -> dict[str, float]:
        rows = [s for s in self.samples if category is None or s.category == category]
        if not rows:
            return {"n": 0}
        return {
            "n": len(rows),
            "recall": statistics.fmean(s.recall for s in rows),
            "full_hit": statistics.fmean(1.0 if s.full else 0.0 for s in rows),
            "used_tokens": statistics.fmean(s.used_tokens for s in rows),
            "p50_ms": statistics.median(s.latency_ms for s in rows),
            "random_recall": statistics.fmean(s.random_recall for s in rows),
        }


def covered_turns(packet: Any, turn_of_event: dict[UUID, str]) -> set[str]:
    covered = {turn_of_event[e.event_id] for e in packet.episodes if e.event_id in turn_of_event}
    covered |= {
        turn_of_event[f.source_event_id]
        for f in packet.facts
        if f.source_event_id is not None and f.source_event_id in turn_of_event
    }
    return covered


# --- the run -------------------------------------------------------------------------------------


def _batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def ingest(client: Any, headers: dict[str, str], conv: Conversation) -> dict[str, UUID]:
    """Writes the turns as events and the observations as facts through the HTTP API."""
    event_of_turn: dict[str, UUID] = {}
    for batch in _batches(conv.turns, 500):
        body = {
            "project_id": PROJECT_ID,
            "subject_id": conv.sample_id,
            "events": [
                {
                    "content": t.content,
                    "occurred_at": t.occurred_at.isoformat(),
                    "metadata": {"dia_id": t.dia_id},
                }
                for t in batch
            ],
        }
        r = await client.post("/v1/events", json=body, headers=headers)
        r.raise_for_status()
        for t, e in zip(batch, r.json()["events"], strict=True):
            event_of_turn[t.dia_id] = UUID(e["event_id"])
    for batch in _batches(conv.observations, 500):
        facts = []
        for o in batch:
            source = next((event_of_turn[i] for i in o.dia_ids if i in event_of_turn), None)
            fact: dict[str, Any] = {
                "content": o.content,
                "valid_from": o.valid_from.isoformat(),
                "metadata": {"dia_ids": list(o.dia_ids)},
            }
            if source is not None:
                fact["source_event_id"] = str(source)
            facts.append(fact)
        body = {"project_id": PROJECT_ID, "subject_id": conv.sample_id, "facts": facts}
        r = await client.post("/v1/facts", json=body, headers=headers)
        r.raise_for_status()
    return event_of_turn


@dataclass
class Service:
    """What a harness measures through: the app's settings, its pool and embedder, a key's
    headers and an HTTP client on the app in process."""

    settings: Any
    pool: Any
    embedder: Any
    headers: dict[str, str]
    client: Any


@asynccontextmanager
async def fresh_service(
    name: str,
    project_id: str,
    *,
    embed_backend: Any,
    query_precision: Any,
    quiet: dict[str, int],
    say: Callable[[str], None],
    build_embedder: Callable[[Any], Any] | None = None,
    client_timeout: float = 600,
) -> AsyncIterator[Service]:
    """The service on a throw-away embedded PostgreSQL, migrated, with an API key of
    `project_id` and the local model (or `build_embedder(settings)`, awaited); everything is
    stopped and deleted on the way out, and the `quiet` loggers' levels restored."""
    import httpx

    from service.api import auth
    from service.app import create_app
    from service.db import connect, create_pool
    from service.db.embedded import embedded_server, embedded_url
    from service.db.migrations import migrate
    from service.embedding.embedder import LocalEmbedder
    from service.settings import Settings
    from tests.helpers.app import asgi_transport

    levels = {logger: logging.getLogger(logger).level for logger in quiet}
    for logger, level in quiet.items():
        logging.getLogger(logger).setLevel(level)
    started = time.perf_counter()
    data_dir = Path(tempfile.mkdtemp(prefix=f"haki-{name}-"))
    pool: Any = None
    embedder: Any = None
    try:
        settings = Settings(
            data_dir=data_dir,
            database_url=embedded_url(data_dir),
            embed_provider="local",
            embed_backend=embed_backend,
            embed_query_precision=query_precision,
        )
        conn = await connect(settings)  # no pgvector codec before the extension exists
        try:
            await migrate(conn)
            _, key = await auth.create_key(conn, project_id, f"{name} harness")
        finally:
            await conn.close()
        pool = await create_pool(settings)
        if build_embedder is None:
            embedder = LocalEmbedder(settings)
            await embedder.load()
        else:
            embedder = await build_embedder(settings)
        say(f"[{name}] database and model ready in {time.perf_counter() - started:.1f}s")
        app = create_app(settings, pool=pool, embedder=embedder)
        transport = asgi_transport(app)
        async with httpx.AsyncClient(
            transport=transport, base_url=f"http://{name}", timeout=client_timeout
        ) as client:
            yield Service(
                settings=settings,
                pool=pool,
                embedder=embedder,
                headers={"Authorization": f"Bearer {key}"},
                client=client,
            )
    finally:
        for logger, level in levels.items():
            logging.getLogger(logger).setLevel(level)
        if embedder is not None:
            await embedder.aclose()
        if pool is not None:
            await pool.close()
        try:
            embedded_server(data_dir).cleanup()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)


async def evaluate(
    conversations: list[Conversation],
    modes: list[Mode],
    embed_backend: Any = "torch",
    *,
    query_precision: Any = "fp32",
    progress: bool = True,
    embedder_name: str | None = None,
    embed_path: Path | None = None,
    event_context: str = "on",
) -> dict[str, Any]:
    """Runs the whole evaluation on a fresh embedded PostgreSQL; returns the metrics."""
    from service.context.call import PROFILE_WEIGHTS, ContextCall
    from service.db.call_runner import run_context_call
    from service.memory import event_context as event_context_worker
    from service.observability.timing import StageTimer
    from service.structs import ContextRequest

    def say(msg: str) -> None:
        if progress:
            print(msg, file=sys.stderr, flush=True)

    async def built(settings: Any) -> Any:
        from benchmarks.embed_models import build
        from service.embedding.embedder import LocalEmbedder

        inner: Any
        if embedder_name is not None:
            inner = await asyncio.to_thread(build, embedder_name, embed_path)
        else:
            inner = LocalEmbedder(settings)
            await inner.load()
        return inner

    started = time.perf_counter()
    # The text-only modes take the embedder-down path, which logs a warning per call, and
    # httpx logs every request (tests share the process).
    async with fresh_service(
        "locomo",
        PROJECT_ID,
        embed_backend=embed_backend,
        query_precision=query_precision,
        quiet={"haki.context": logging.ERROR, "httpx": logging.WARNING},
        say=say,
        build_embedder=None if embedder_name is None else built,
    ) as svc:
        embedder, client, headers = svc.embedder, svc.client, svc.headers
        no_vector = _NoVector(embedder.name)
        stats: dict[str, ModeStats] = {m.name: ModeStats() for m in modes}
        embed_ms: list[float] = []
        ingest_s = 0.0
        texts = 0
        for conv in conversations:
            t0 = time.perf_counter()
            event_of_turn = await ingest(client, headers, conv)
            if event_context == "on":
                # As the serving process's background task would, before any question.
                await event_context_worker.drain(svc.pool, embedder)
            ingest_s += time.perf_counter() - t0
            texts += len(conv.turns) + len(conv.observations)
            turn_of_event = {v: k for k, v in event_of_turn.items()}
            n_turns = len(conv.turns)
            say(
                f"[locomo] {conv.sample_id}: {len(conv.turns)} turns + {len(conv.observations)} facts "
                f"ingested in {time.perf_counter() - t0:.1f}s; {len(conv.questions)} questions"
            )
            for qa in conv.questions:
                # One uncached embedding per question, timed; every mode then hits the cache.
                e0 = time.perf_counter()
                await embedder.embed([qa.question], purpose="query")
                embed_ms.append((time.perf_counter() - e0) * 1000.0)
                for mode in modes:
                    req = ContextRequest(
                        project_id=PROJECT_ID,
                        subject_id=conv.sample_id,
                        query=qa.question,
                        budget_tokens=mode.budget,
                        profile=mode.profile,
                    )
                    call = ContextCall.of(req, svc.settings, weights=mode.weights)  # None: the profile's own
                    async with svc.pool.acquire() as conn:
                        a0 = time.perf_counter()
                        packet = await run_context_call(
                            conn, embedder if mode.query_vector else no_vector, call, timer=StageTimer()
                        )
                        latency = (time.perf_counter() - a0) * 1000.0
                    assert packet.profile == mode.profile, (packet.profile, mode.name)
                    covered = covered_turns(packet, turn_of_event)
                    hits = sum(1 for d in qa.evidence if d in covered)
                    stats[mode.name].samples.append(
                        Sample(
                            category=qa.category,
                            recall=hits / len(qa.evidence),
                            full=hits == len(qa.evidence),
                            used_tokens=packet.used_tokens,
                            latency_ms=latency,
                            random_recall=len(covered) / n_turns,
                        )
                    )
        elapsed = time.perf_counter() - started
        # Only what differs from the default run is named, so that its output stays as it was.
        chosen: dict[str, str] = (
            {} if embedder_name is None else {"embedder": f"{embedder_name} ({embedder.name})"}
        )
        if event_context != "on":
            chosen["event_context"] = event_context
        return {
            **chosen,
            "modes": [
                {
                    "name": m.name,
                    "profile": m.profile,
                    "budget": m.budget,
                    "weights": list(m.weights or PROFILE_WEIGHTS[m.profile]),
                    "query_vector": m.query_vector,
                    "group": m.group,
                    "note": m.note,
                    "overall": stats[m.name].summary(),
                    "categories": {str(c): stats[m.name].summary(c) for c in CATEGORIES},
                }
                for m in modes
            ],
            "conversations": [c.sample_id for c in conversations],
            "questions": sum(len(c.questions) for c in conversations),
            "dropped_evidence_ids": sum(c.dropped_evidence for c in conversations),
            "texts_ingested": texts,
            "ingest_seconds": ingest_s,
            "embed_p50_ms": statistics.median(embed_ms) if embed_ms else 0.0,
            "elapsed_seconds": elapsed,
        }


def select(
    conversations: list[Conversation], n_conv: int | None, n_questions: int | None
) -> list[Conversation]:
    chosen = conversations[:n_conv] if n_conv else conversations
    if n_questions:
        for c in chosen:
            c.questions = c.questions[:n_questions]
    return chosen


# --- report --------------------------------------------------------------------------------------


def machine() -> str:
    from benchmarks.machine import cpu_model

    system = f"{platform.system()} {platform.release()}"
    return f"{cpu_model()}, {os.cpu_count()} cores, {system}, Python {platform.python_version()}"


def markdown(result: dict[str, Any], command: str) -> str:
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {machine()}  ",
        f"Run time: {result['elapsed_seconds']:.0f} s (ingest {result['texts_ingested']} texts in "
        f"{result['ingest_seconds']:.0f} s); {result['questions']} questions over "
        f"{len(result['conversations'])} conversations ({', '.join(result['conversations'])}); "
        f"query embedding p50 {result['embed_p50_ms']:.1f} ms (not in the latencies below).",
        *(
            [f"Embedder: {result['embedder']}, for writes and queries (evaluation only)."]
            if "embedder" in result
            else []
        ),
        *(
            ["Events' vectors in context not made (`--event-context off`, evaluation only)."]
            if "event_context" in result
            else []
        ),
        *(
            ["Every vector walk on its HNSW graphs (`--graph-walks`, evaluation only)."]
            if "graph_walks" in result
            else []
        ),
        "",
        "Evidence recall (mean over QAs) per category, then overall:",
        "",
        "| mode | budget | "
        + " | ".join(f"{c} {n}" for c, n in CATEGORIES.items())
        + " | **overall** | full-evidence hit | mean used tokens | p50 latency | random packet |",
        "|---|---:|" + "---:|" * len(CATEGORIES) + "---:|---:|---:|---:|---:|",
    ]
    for m in result["modes"]:
        cats = []
        for c in CATEGORIES:
            s = m["categories"][str(c)]
            cats.append(f"{s['recall']:.3f}" if s["n"] else "–")
        o = m["overall"]
        if not o["n"]:
            continue
        lines.append(
            f"| {m['name']} | {m['budget']} | "
            + " | ".join(cats)
            + f" | **{o['recall']:.3f}** | {o['full_hit']:.3f} | {o['used_tokens']:.0f} | "
            f"{o['p50_ms']:.1f} ms | {o['random_recall']:.3f} |"
        )
    counts = result["modes"][0]["categories"]
    lines += [
        "",
        "Questions per category: "
        + ", ".join(f"{n} {counts[str(c)]['n']}" for c, n in CATEGORIES.items())
        + ".",
        "",
        "Full-evidence hit rate per category:",
        "",
        "| mode | " + " | ".join(CATEGORIES.values()) + " |",
        "|---|" + "---:|" * len(CATEGORIES),
    ]
    for m in result["modes"]:
        cats = [
            f"{m['categories'][str(c)]['full_hit']:.3f}" if m["categories"][str(c)]["n"] else "–"
            for c in CATEGORIES
        ]
        lines.append(f"| {m['name']} | " + " | ".join(cats) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="LoCoMo JSON (default: %(default)s)")
    p.add_argument(
        "--conversations", type=int, default=None, metavar="N", help="only the first N conversations"
    )
    p.add_argument(
        "--questions",
        type=int,
        default=None,
        metavar="N",
        help="only the first N questions (with evidence) of each conversation",
    )
    p.add_argument(
        "--modes",
        default=None,
        help="comma-separated mode names or groups: `unified`, `facts_first`, `all`\n"
        "(default: all); `<profile> hybrid` names a profile's hybrid alone; names:\n"
        + ", ".join(m.name for m in default_modes()),
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
    from benchmarks.embed_models import CANDIDATES

    p.add_argument(
        "--embedder",
        default=None,
        choices=CANDIDATES,
        help="evaluation only: another 384-dimension model (benchmarks/embed_models.py) for writes\n"
        "and queries (default: the service's local model, --embed-backend)",
    )
    p.add_argument(
        "--embed-path",
        type=Path,
        default=None,
        help="the directory the --embedder packages were installed into (pip --target)",
    )
    p.add_argument(
        "--event-context",
        default="on",
        choices=EVENT_CONTEXTS,
        help="`off`: the events' vectors in context are not made (HAKI_EVENT_CONTEXT=false), so\n"
        "`unified` ranks episodes by their own vectors (default: %(default)s)",
    )
    p.add_argument(
        "--graph-walks",
        action="store_true",
        help="evaluation only: every vector walk on its HNSW graphs (exact_scan_min 1), as scopes\n"
        "beyond about 1,000 rows are served; LoCoMo's own scopes are scanned exactly",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dataset.is_file():
        print(f"dataset not found: {args.dataset}", file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    conversations = select(load_dataset(args.dataset), args.conversations, args.questions)
    modes = default_modes()
    wanted = [n.strip() for n in (args.modes or "all").split(",") if n.strip()]
    if "all" not in wanted:
        unknown = set(wanted) - {m.name for m in modes} - {m.group for m in modes} - set(HYBRID_ALIASES)
        if unknown:
            print(f"unknown modes: {sorted(unknown)}; known: {[m.name for m in modes]}", file=sys.stderr)
            return 2
        modes = select_modes(modes, wanted)
    if args.graph_walks:
        import service.repository.context as context_repository

        # The size test's floor (its other term is ~200 rows here): the repository's constant.
        setattr(context_repository, "EXACT_SCAN_MIN_FACTS", 1)  # noqa: B010
    result = asyncio.run(
        evaluate(
            conversations,
            modes,
            args.embed_backend,
            query_precision=args.query_precision,
            embedder_name=args.embedder,
            embed_path=args.embed_path,
            event_context=args.event_context,
        )
    )
    if args.graph_walks:
        result["graph_walks"] = True
    command = "benchmarks/locomo.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    print(markdown(result, command.strip()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
