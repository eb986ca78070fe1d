"""Deterministic synthetic memory for the benchmarks: texts, clustered vectors, COPY loaders.

Everything derives from one numpy seed, so two runs load the same rows (ids included).

Vectors follow a two-level topic structure, like sentence embeddings of short personal facts:
32 topics, 8 sub-topics (items) each. A fact's vector is its item's centre plus noise, and the
item centre is its topic centre plus noise, so a query near an item finds that item's facts
first, then the rest of its topic, then the far field: exact top-64 lists are graded, which is
what makes HNSW recall a meaningful figure (uniformly random vectors have no neighbours worth
the name). Texts name the same item, so the full-text side matches the same facts.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from pgvector import Vector

from service.constants import EMBED_DIM

SEED = 20240917

NAMES = (
    "Alice",
    "Bruno",
    "Chloe",
    "Daniel",
    "Emma",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Ugo",
    "Vera",
    "Wang",
    "Xena",
    "Yusuf",
    "Zoe",
    "Amir",
    "Bianca",
    "Carlos",
    "Dana",
    "Elif",
    "Felix",
    "Greta",
    "Hana",
    "Ivan",
    "Julia",
    "Kenji",
    "Lena",
    "Marco",
    "Nadia",
    "Omar",
    "Priya",
    "Rafael",
    "Sofia",
    "Tomas",
    "Uma",
    "Viktor",
    "Yara",
)

# 32 topics x 8 items. Capitalised items double as multi-hop entities.
TOPICS: dict[str, tuple[str, ...]] = {
    "food": ("sushi", "ramen", "tacos", "pizza", "curry", "dumplings", "pancakes", "falafel"),
    "drink": ("espresso", "matcha", "lemonade", "kombucha", "cider", "chai", "smoothies", "mojitos"),
    "music": ("jazz", "techno", "opera", "blues", "reggae", "flamenco", "bluegrass", "synthwave"),
    "sport": ("tennis", "climbing", "rowing", "fencing", "surfing", "cycling", "badminton", "karate"),
    "travel": ("Lisbon", "Kyoto", "Oslo", "Nairobi", "Lima", "Hanoi", "Reykjavik", "Marrakesh"),
    "pets": ("beagle", "parrot", "tortoise", "ferret", "hamster", "goldfish", "corgi", "iguana"),
    "work": ("invoices", "payroll", "roadmap", "audit", "onboarding", "hiring", "budget", "deadline"),
    "tech": ("kubernetes", "postgres", "rust", "laptop", "router", "firmware", "terraform", "python"),
    "health": ("allergy", "migraine", "insulin", "physio", "vitamins", "asthma", "dentist", "cholesterol"),
    "family": ("daughter", "nephew", "grandmother", "cousin", "twins", "stepfather", "godmother", "aunt"),
    "hobbies": ("knitting", "pottery", "chess", "origami", "gardening", "calligraphy", "woodwork", "birding"),
    "books": ("Tolkien", "Austen", "Murakami", "Borges", "Atwood", "Tolstoy", "Calvino", "Morrison"),
    "film": ("anime", "documentaries", "westerns", "thrillers", "musicals", "noir", "sitcoms", "cartoons"),
    "finance": ("mortgage", "pension", "savings", "crypto", "stocks", "taxes", "insurance", "loan"),
    "home": ("kitchen", "balcony", "garage", "attic", "basement", "fireplace", "terrace", "bathroom"),
    "clothes": ("sneakers", "scarf", "raincoat", "sweater", "boots", "jeans", "hoodie", "sandals"),
    "weather": ("snow", "humidity", "heatwave", "drizzle", "thunderstorms", "fog", "wind", "sunshine"),
    "cars": ("Tesla", "Volvo", "Peugeot", "Subaru", "Fiat", "Toyota", "Skoda", "Mazda"),
    "study": (
        "calculus",
        "chemistry",
        "linguistics",
        "statistics",
        "philosophy",
        "geology",
        "astronomy",
        "economics",
    ),
    "languages": ("Spanish", "Mandarin", "Swahili", "German", "Portuguese", "Japanese", "Arabic", "Italian"),
    "diet": ("vegan", "gluten", "lactose", "keto", "halal", "kosher", "peanuts", "shellfish"),
    "games": ("poker", "sudoku", "crosswords", "Minecraft", "Zelda", "Tetris", "bridge", "backgammon"),
    "art": (
        "watercolor",
        "sculpture",
        "photography",
        "graffiti",
        "mosaics",
        "etching",
        "ceramics",
        "sketching",
    ),
    "plants": ("tomatoes", "roses", "basil", "orchids", "cactus", "lavender", "tulips", "bonsai"),
    "apps": ("Slack", "WhatsApp", "Discord", "Signal", "Mastodon", "Telegram", "Reddit", "Instagram"),
    "shopping": (
        "groceries",
        "furniture",
        "bicycles",
        "vinyl",
        "perfume",
        "jewelry",
        "stationery",
        "headphones",
    ),
    "projects": ("Apollo", "Hermes", "Zephyr", "Orion", "Phoenix", "Atlas", "Nimbus", "Vega"),
    "occasions": (
        "wedding",
        "birthday",
        "conference",
        "marathon",
        "reunion",
        "festival",
        "graduation",
        "housewarming",
    ),
    "transport": ("subway", "tram", "ferry", "scooter", "carpool", "train", "bus", "taxi"),
    "fears": ("spiders", "heights", "flying", "crowds", "needles", "darkness", "thunder", "clowns"),
    "volunteering": (
        "shelter",
        "hospice",
        "library",
        "cleanup",
        "mentoring",
        "tutoring",
        "foodbank",
        "fundraiser",
    ),
    "sleep": ("insomnia", "naps", "snoring", "melatonin", "nightmares", "jetlag", "alarm", "mattress"),
}
TOPIC_NAMES = tuple(TOPICS)
ITEMS = tuple(item for items in TOPICS.values() for item in items)
N_TOPICS = len(TOPICS)
ITEMS_PER_TOPIC = 8
N_ITEMS = len(ITEMS)

VERBS = (
    "likes",
    "mentioned",
    "talked about",
    "asked about",
    "is worried about",
    "recommended",
    "bought",
    "plans to try",
    "stopped",
    "keeps forgetting",
    "loves",
    "complained about",
)
TAILS = (
    "last week",
    "since 2019",
    "every weekend",
    "at the office",
    "with friends",
    "on Fridays",
    "during the holidays",
    "before the move",
    "after the trip",
    "most evenings",
    "this spring",
    "at home",
    "with the kids",
    "for years",
    "again yesterday",
    "in the new flat",
)
EVENT_TEMPLATES = (
    "Call with {name} about {item}",
    "{name} sent photos of the {item}",
    "Meeting notes: {item} review with {name}",
    "{name} booked a slot for {item}",
)
QUESTION_TEMPLATES = (
    "What does {name} think about {item}?",
    "Tell me about {name} and {item}",
    "{item}",
    "{name} {item}",
    "Any news on {item}?",
    "What should I remember about {item} {tail}?",
    "{name} {verb} {item}",
    "Is {name} into {topic}?",
)

# Mixing weights of the vector model (unit vectors; see the module docstring).
TOPIC_TO_ITEM_NOISE = 0.9
ITEM_TO_FACT_NOISE = 0.9
QUERY_NOISE = 0.6

NOW = datetime(2025, 6, 1, tzinfo=UTC)

FACT_COLUMNS = [
    "project_id",
    "fact_id",
    "subject_id",
    "content",
    "key",
    "status",
    "valid_from",
    "valid_to",
    "recorded_from",
    "volatility",
    "stale_after",
    "embedding",
    "recorded_to",
]
EVENT_COLUMNS = [
    "project_id", "event_id", "subject_id", "content", "occurred_at", "embedding", "context_embedding",
    "context_made_at",
]  # fmt: skip


def _unit_rows(a: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)
    return unit


def _noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return _unit_rows(rng.standard_normal((n, EMBED_DIM), dtype=np.float32))


class VectorModel:
    """The topic and item centres, fixed by the seed."""

    def __init__(self, seed: int = SEED) -> None:
        rng = np.random.default_rng(seed)
        self.topics = _noise(rng, N_TOPICS)
        parent = np.repeat(self.topics, ITEMS_PER_TOPIC, axis=0)
        self.items = _unit_rows(parent + TOPIC_TO_ITEM_NOISE * _noise(rng, N_ITEMS))

    def facts(self, rng: np.random.Generator, item_ids: np.ndarray) -> np.ndarray:
        return _unit_rows(self.items[item_ids] + ITEM_TO_FACT_NOISE * _noise(rng, len(item_ids)))

    def queries(self, rng: np.random.Generator, item_ids: np.ndarray) -> np.ndarray:
        return _unit_rows(self.items[item_ids] + QUERY_NOISE * _noise(rng, len(item_ids)))


def _uuid7(rng: np.random.Generator, when: datetime) -> uuid.UUID:
    """A UUIDv7 of `when` whose random bits come from `rng` (so ids are reproducible)."""
    ms = int(when.timestamp() * 1000) & ((1 << 48) - 1)
    counter = int(rng.integers(0, 1 << 12))
    rand = int(rng.integers(0, 1 << 62, dtype=np.int64))
    return uuid.UUID(int=ms << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand)


def fact_text(name: str, verb: str, item: str, tail: str) -> str:
    return f"{name} {verb} {item} {tail}"


@dataclass
class ScopeSpec:
    subject_id: str
    facts: int  # active, servable or blocked, facts
    inactive: int = 0  # superseded and retracted facts on top of `facts`
    events: int = 0
    open_conflicts: int = 0  # pairs of active facts of one key, each pair in an open ConflictSet
    stale_volatile: int = 0  # active volatile facts whose stale_after has passed


@dataclass
class ScopeRows:
    spec: ScopeSpec
    fact_ids: list[uuid.UUID] = field(default_factory=list)
    conflict_pairs: list[tuple[str, uuid.UUID, uuid.UUID]] = field(default_factory=list)


def fact_records(
    project_id: str,
    spec: ScopeSpec,
    model: VectorModel,
    rng: np.random.Generator,
    out: ScopeRows,
    chunk: int = 20_000,
) -> Iterator[list[tuple[Any, ...]]]:
    """COPY records of one scope, chunk by chunk (a 1M-row scope never sits in memory at once)."""
    total = spec.facts + spec.inactive
    made = 0
    while made < total:
        n = min(chunk, total - made)
        item_ids = rng.integers(0, N_ITEMS, n)
        vecs = model.facts(rng, item_ids)
        names = rng.integers(0, len(NAMES), n)
        verbs = rng.integers(0, len(VERBS), n)
        tails = rng.integers(0, len(TAILS), n)
        ages = rng.exponential(120.0, n)  # days; most memories are recent
        dated = rng.random(n) < 0.3
        records: list[tuple[Any, ...]] = []
        for j in range(n):
            i = made + j
            recorded = NOW - timedelta(days=float(ages[j]))
            valid_from = recorded - timedelta(days=3) if dated[j] else None
            status = "active"
            valid_to = None
            key = None
            volatility = "stable"
            stale_after = None
            recorded_to = None  # believed until (migration 0012): the inactive tail's day after
            if i >= spec.facts:  # the inactive tail: superseded (closed) or retracted
                status = "superseded" if i % 3 else "retracted"
                valid_to = recorded + timedelta(days=1) if status == "superseded" else None
                recorded_to = recorded + timedelta(days=1)
            elif i < 2 * spec.open_conflicts:
                key = f"slot-{i // 2}"
            elif i < 2 * spec.open_conflicts + spec.stale_volatile:
                volatility = "volatile"
                stale_after = timedelta(days=1)
                recorded = NOW - timedelta(days=30 + float(ages[j]))
            fact_id = _uuid7(rng, recorded)
            if status == "active":
                out.fact_ids.append(fact_id)
            if key is not None and i % 2 == 1:
                out.conflict_pairs.append((key, out.fact_ids[-2], fact_id))
            records.append(
                (
                    project_id,
                    fact_id,
                    spec.subject_id,
                    fact_text(NAMES[names[j]], VERBS[verbs[j]], ITEMS[item_ids[j]], TAILS[tails[j]]),
                    key,
                    status,
                    valid_from,
                    valid_to,
                    recorded,
                    volatility,
                    stale_after,
                    Vector(vecs[j]),
                    recorded_to,
                )
            )
        made += n
        yield records


def event_records(
    project_id: str, spec: ScopeSpec, model: VectorModel, rng: np.random.Generator
) -> list[tuple[Any, ...]]:
    n = spec.events
    item_ids = rng.integers(0, N_ITEMS, n)
    vecs = model.facts(rng, item_ids)
    names = rng.integers(0, len(NAMES), n)
    templates = rng.integers(0, len(EVENT_TEMPLATES), n)
    ages = rng.exponential(60.0, n)
    # Vectors in context as the worker leaves them (rule 8): each event's made with the one before
    # it (here the sum of both vectors), the scope's first its own, stamped when seeded.
    made = datetime.now(UTC)
    in_time = np.argsort(-ages, kind="stable")
    context = vecs.copy()
    context[in_time[1:]] = _unit_rows(vecs[in_time[1:]] + vecs[in_time[:-1]])
    rows = []
    for j in range(n):
        occurred = NOW - timedelta(days=float(ages[j]))
        text = EVENT_TEMPLATES[templates[j]].format(name=NAMES[names[j]], item=ITEMS[item_ids[j]])
        rows.append(
            (project_id, _uuid7(rng, occurred), spec.subject_id, text, occurred, Vector(vecs[j]),
             Vector(context[j]), made)
        )  # fmt: skip
    return rows


@dataclass
class Query:
    text: str
    vector: np.ndarray
    item: int


def queries(n: int, seed: int = SEED + 1, model: VectorModel | None = None) -> list[Query]:
    """A fixed pool of query texts (questions and keyword-style), each with its query vector."""
    model = model or VectorModel()
    rng = np.random.default_rng(seed)
    item_ids = rng.integers(0, N_ITEMS, n)
    vecs = model.queries(rng, item_ids)
    out = []
    for j in range(n):
        item = int(item_ids[j])
        text = QUESTION_TEMPLATES[j % len(QUESTION_TEMPLATES)].format(
            name=NAMES[int(rng.integers(0, len(NAMES)))],
            item=ITEMS[item],
            tail=TAILS[int(rng.integers(0, len(TAILS)))],
            verb=VERBS[int(rng.integers(0, len(VERBS)))],
            topic=TOPIC_NAMES[item // ITEMS_PER_TOPIC],
        )
        out.append(Query(text=text, vector=vecs[j], item=item))
    return out


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


# --- loading ---------------------------------------------------------------------------------


@dataclass
class LoadReport:
    rows: int = 0
    copy_seconds: float = 0.0
    index_seconds: dict[str, float] = field(default_factory=dict)
    analyze_seconds: float = 0.0


async def load(
    conn: Any,
    project_id: str,
    specs: list[ScopeSpec],
    *,
    seed: int = SEED,
    maintenance_work_mem: str = "2GB",
    parallel_workers: int = 2,
    log: Any = None,
) -> tuple[dict[str, ScopeRows], LoadReport]:
    """COPY the scopes into an empty, migrated database, then build the indexes once.

    The secondary indexes of facts and events are dropped for the load and rebuilt from their
    own catalog definitions (benchmarks/sql/bench.sql), which is how a DBA bulk-loads and what makes
    the HNSW build time a separate, reportable figure.
    """
    import time

    from benchmarks.sql import load_bench_queries
    from service.ids import uuid7

    b = load_bench_queries()
    say = log or (lambda *_: None)
    model = VectorModel(seed)
    rng = np.random.default_rng(seed + 7)
    report = LoadReport()
    await b.bench_set_maintenance(
        conn, maintenance_work_mem=maintenance_work_mem, parallel_workers=parallel_workers
    )
    await b.bench_stash_indexes(conn)
    stashed = [dict(r) async for r in b.bench_stashed_indexes(conn)]
    scopes = {spec.subject_id: ScopeRows(spec) for spec in specs}
    start = time.perf_counter()
    # Rows of every scope interleave in the heap, as they do when many subjects write over time
    # (a scope-by-scope load would cluster each scope on its own pages and flatter every scan).
    rounds = max(1, sum(s.facts + s.inactive for s in specs) // 20_000)
    streams = [
        fact_records(
            project_id,
            spec,
            model,
            rng,
            scopes[spec.subject_id],
            chunk=max(1, math.ceil((spec.facts + spec.inactive) / rounds)),
        )
        for spec in specs
    ]
    while streams:
        batch: list[tuple[Any, ...]] = []
        for stream in list(streams):
            chunk = next(stream, None)
            if chunk is None:
                streams.remove(stream)
            else:
                batch.extend(chunk)
        if batch:
            order = rng.permutation(len(batch))
            await conn.copy_records_to_table("facts", records=[batch[i] for i in order], columns=FACT_COLUMNS)
            report.rows += len(batch)
            say(f"  copied {report.rows} facts")
    events = [row for spec in specs if spec.events for row in event_records(project_id, spec, model, rng)]
    if events:
        order = rng.permutation(len(events))
        await conn.copy_records_to_table("events", records=[events[i] for i in order], columns=EVENT_COLUMNS)
    for spec in specs:
        rows = scopes[spec.subject_id]
        if rows.conflict_pairs:
            sets = [(project_id, uuid7(), spec.subject_id, key, "open") for key, _, _ in rows.conflict_pairs]
            await conn.copy_records_to_table(
                "conflict_sets",
                records=sets,
                columns=["project_id", "conflict_set_id", "subject_id", "key", "status"],
            )
            members = [
                (project_id, s[1], fid)
                for s, (_, a, b) in zip(sets, rows.conflict_pairs, strict=True)
                for fid in (a, b)
            ]
            await conn.copy_records_to_table(
                "conflict_members", records=members, columns=["project_id", "conflict_set_id", "fact_id"]
            )
    report.copy_seconds = time.perf_counter() - start
    for idx in stashed:
        t0 = time.perf_counter()
        await b.bench_restore_index(conn, index_name=idx["index_name"])
        report.index_seconds[idx["index_name"]] = time.perf_counter() - t0
        seconds = report.index_seconds[idx["index_name"]]
        say(f"  built {idx['index_name']} ({idx['method']}) in {seconds:.1f}s")
    t0 = time.perf_counter()
    await b.bench_vacuum_analyze(conn)
    report.analyze_seconds = time.perf_counter() - t0
    return scopes, report
