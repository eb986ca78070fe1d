"""Calibrate the recall gate (HAKI_RECALL_MAX_DISTANCE) for the configured embedder.

docs/spec/context-assembler.md, "Recall gate": the right floor depends on HAKI_EMBED_PROVIDER, so it
is measured, never copied from another embedder. This script embeds a labelled set with the
embedder the service would build from the current environment
(`build_embedder(Settings.from_env())`), measures the cosine distance of every (query, text)
pair, and prints:

- the distance distribution (percentiles) of relevant and of irrelevant texts;
- a table: threshold -> share of relevant texts kept (distance <= threshold), share of
  irrelevant texts gated (distance > threshold), share of queries that keep at least one
  relevant text;
- a recommended value: the smallest threshold of the grid that still keeps at least
  --min-recall (default 95 %) of the relevant texts, i.e. the tightest gate that loses at most
  5 % of the evidence.

It only prints: it never writes a value to a file, the environment or the database.

Labelled sets:
- default: LoCoMo questions (../shared/datasets/locomo_dev.json, see SOURCE.md beside it; read in
  place, never copied). A sample of --limit QA items with evidence; each question is compared with
  every turn of its conversation (`"Speaker: text"`, plus the photo caption when there is one):
  the evidence turns are relevant, the other turns irrelevant. Each conversation's turns are
  embedded once.
- --labelled FILE: a JSON list of {"query": str, "relevant": [str], "irrelevant": [str]}.

    HAKI_EMBED_PROVIDER=local .venv/bin/python scripts/check_recall_floor.py --limit 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from service.embedding.embedder import Embedder, build_embedder  # noqa: E402
from service.embedding.scheduler import Purpose  # noqa: E402
from service.settings import Settings  # noqa: E402

DEFAULT_DATASET = REPO_ROOT.parent / "shared" / "datasets" / "locomo_dev.json"
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
# SOURCE.md: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial. Adversarial
# questions ask about what the conversation does not say, so their "evidence" is a near miss.
DEFAULT_CATEGORIES = (1, 2, 3, 4)

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")
_ID_SEPARATORS = re.compile(r"[;,\s]+")


@dataclass
class Item:
    """One query and the texts labelled for it (indices into a shared text pool)."""

    query: str
    relevant: list[int]
    irrelevant: list[int]


@dataclass
class LabelledSet:
    name: str
    texts: list[str] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)


# --- labelled sets -----------------------------------------------------------------------------


def normalise_dia_ids(raw: str) -> list[str]:
    """SOURCE.md: split on `;`, `,` and spaces, `D:` -> `D`, strip leading zeros, drop the rest."""
    out: list[str] = []
    for part in _ID_SEPARATORS.split(str(raw).strip()):
        m = _DIA_ID.match(part.replace("D:", "D"))
        if m:
            out.append(f"D{int(m[1])}:{int(m[2])}")
    return out


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn.get('text', '')}".strip()
    caption = (turn.get("blip_caption") or "").strip()
    return f"{text} [shares a photo: {caption}]" if caption else text


def load_locomo(path: Path, limit: int, seed: int, categories: Sequence[int]) -> LabelledSet:
    with path.open(encoding="utf-8") as fh:
        samples = json.load(fh)
    # Every QA with resolvable evidence, as (sample index, question, evidence ids).
    pool: list[tuple[int, str, list[str]]] = []
    turns_of: list[dict[str, str]] = []
    for s_index, sample in enumerate(samples):
        conv = sample["conversation"]
        turns: dict[str, str] = {}
        for n in sorted(int(m[1]) for k in conv if (m := _SESSION_KEY.match(k))):
            for turn in conv[f"session_{n}"]:
                ids = normalise_dia_ids(turn["dia_id"])
                turns[ids[0] if ids else turn["dia_id"]] = turn_text(turn)
        turns_of.append(turns)
        for qa in sample.get("qa", []):
            if int(qa.get("category", 0)) not in categories:
                continue
            ids = [i for raw in qa.get("evidence", []) for i in normalise_dia_ids(raw)]
            evidence = list(dict.fromkeys(i for i in ids if i in turns))
            if evidence:
                pool.append((s_index, str(qa["question"]), evidence))
    chosen = random.Random(seed).sample(pool, min(limit, len(pool))) if limit > 0 else pool
    chosen.sort(key=lambda c: c[0])

    out = LabelledSet(name=f"{path.name} ({len(chosen)} of {len(pool)} QA items with evidence)")
    offsets: dict[int, dict[str, int]] = {}
    for s_index, question, evidence in chosen:
        if s_index not in offsets:  # each conversation's turns enter the pool (and get embedded) once
            offsets[s_index] = {}
            for dia_id, text in turns_of[s_index].items():
                offsets[s_index][dia_id] = len(out.texts)
                out.texts.append(text)
        index = offsets[s_index]
        relevant = {index[i] for i in evidence}
        out.items.append(Item(question, sorted(relevant), [j for j in index.values() if j not in relevant]))
    return out


def load_labelled(path: Path) -> LabelledSet:
    with path.open(encoding="utf-8") as fh:
        raw = json.load(fh)
    if not isinstance(raw, list):
        raise SystemExit(f"{path}: expected a JSON list of {{query, relevant, irrelevant}}")
    out = LabelledSet(name=f"{path.name} ({len(raw)} queries)")
    position: dict[str, int] = {}

    def idx(text: str) -> int:
        if text not in position:
            position[text] = len(out.texts)
            out.texts.append(text)
        return position[text]

    for n, entry in enumerate(raw):
        try:
            query = str(entry["query"])
            relevant = [idx(str(t)) for t in entry["relevant"]]
            irrelevant = [idx(str(t)) for t in entry["irrelevant"]]
        except (KeyError, TypeError) as exc:
            raise SystemExit(f"{path}: entry {n} needs query, relevant and irrelevant ({exc})") from exc
        out.items.append(Item(query, relevant, irrelevant))
    return out


# --- measure ----------------------------------------------------------------------------------


async def embed_all(
    embedder: Embedder, texts: Sequence[str], chunk: int = 512, purpose: Purpose = "write"
) -> np.ndarray:
    vectors: list[np.ndarray] = []
    for start in range(0, len(texts), chunk):
        vectors.extend(await embedder.embed(list(texts[start : start + chunk]), purpose=purpose))
    return np.vstack(vectors).astype(np.float64) if vectors else np.zeros((0, 0))


async def distances(embedder: Embedder, data: LabelledSet) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per query: cosine distances to its relevant texts, and to its irrelevant texts."""
    text_vecs = await embed_all(embedder, data.texts)
    # As a context call embeds them (HAKI_EMBED_QUERY_PRECISION): the gate compares those vectors.
    query_vecs = await embed_all(embedder, [item.query for item in data.items], purpose="query")
    relevant: list[np.ndarray] = []
    irrelevant: list[np.ndarray] = []
    for item, q in zip(data.items, query_vecs, strict=True):
        # The embedders return unit vectors: cosine distance = 1 - dot product.
        relevant.append(1.0 - text_vecs[item.relevant] @ q if item.relevant else np.zeros(0))
        irrelevant.append(1.0 - text_vecs[item.irrelevant] @ q if item.irrelevant else np.zeros(0))
    return relevant, irrelevant


def threshold_grid(step: float, top: float) -> list[float]:
    n = round(top / step)
    return [round(step * i, 6) for i in range(1, n + 1)]


def recommend(relevant: np.ndarray, grid: Sequence[float], min_recall: float) -> float | None:
    """The smallest threshold keeping at least `min_recall` of the relevant texts."""
    for t in grid:
        if relevant.size and float(np.mean(relevant <= t)) >= min_recall:
            return t
    return None


def report(
    data: LabelledSet,
    embedder_name: str,
    per_query_relevant: list[np.ndarray],
    per_query_irrelevant: list[np.ndarray],
    grid: Sequence[float],
    min_recall: float,
) -> str:
    rel = np.concatenate(per_query_relevant) if per_query_relevant else np.zeros(0)
    irr = np.concatenate(per_query_irrelevant) if per_query_irrelevant else np.zeros(0)
    lines = [
        f"embedder: {embedder_name}",
        f"labelled set: {data.name}",
        f"pairs: {rel.size} relevant, {irr.size} irrelevant, over {len(data.items)} queries",
        "",
        "cosine distance percentiles",
        f"{'':<12}" + "".join(f"{'p' + str(p):>8}" for p in PERCENTILES),
    ]
    for label, values in (("relevant", rel), ("irrelevant", irr)):
        if values.size:
            cells = "".join(f"{v:>8.3f}" for v in np.percentile(values, PERCENTILES))
        else:
            cells = "".join(f"{'-':>8}" for _ in PERCENTILES)
        lines.append(f"{label:<12}{cells}")
    lines += [
        "",
        "threshold  relevant kept  irrelevant gated  queries with a relevant kept",
    ]
    for t in grid:
        kept = float(np.mean(rel <= t)) if rel.size else float("nan")
        gated = float(np.mean(irr > t)) if irr.size else float("nan")
        with_hit = float(np.mean([bool(np.any(r <= t)) for r in per_query_relevant if r.size]))
        lines.append(f"{t:>9.2f}  {kept:>13.1%}  {gated:>16.1%}  {with_hit:>28.1%}")
    lines.append("")
    best = recommend(rel, grid, min_recall)
    if best is None:
        lines.append(
            f"recommended: none (no threshold up to {grid[-1]:.2f} keeps {min_recall:.0%} of relevant)"
        )
    else:
        kept = float(np.mean(rel <= best))
        gated = float(np.mean(irr > best)) if irr.size else float("nan")
        lines.append(
            f"recommended: HAKI_RECALL_MAX_DISTANCE={best:.2f} for {embedder_name} "
            f"(smallest threshold keeping >= {min_recall:.0%} of relevant: keeps {kept:.1%}, "
            f"gates {gated:.1%} of irrelevant). Printed only: set it yourself where you deploy."
        )
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset", type=Path, default=DEFAULT_DATASET, help="LoCoMo JSON (default: %(default)s)"
    )
    src.add_argument(
        "--labelled", type=Path, help="JSON list of {query, relevant: [text], irrelevant: [text]}"
    )
    p.add_argument("--limit", type=int, default=200, help="LoCoMo QA items to sample, 0 = all (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument(
        "--categories",
        default=",".join(map(str, DEFAULT_CATEGORIES)),
        help="LoCoMo QA categories to use (default: %(default)s; 5 = adversarial)",
    )
    p.add_argument("--min-recall", type=float, default=0.95, help="share of relevant to keep (default: 0.95)")
    p.add_argument("--step", type=float, default=0.05, help="threshold grid step (default: 0.05)")
    p.add_argument(
        "--max-threshold", type=float, default=1.2, help="last threshold of the grid (default: 1.2)"
    )
    args = p.parse_args(argv)
    if not 0 < args.min_recall <= 1:
        p.error("--min-recall must be in (0, 1]")
    if not 0 < args.step <= args.max_threshold <= 2:
        p.error("need 0 < --step <= --max-threshold <= 2")
    try:
        args.categories = tuple(int(c) for c in str(args.categories).split(",") if c.strip())
    except ValueError:
        p.error("--categories is a comma-separated list of integers")
    return args


async def run(args: argparse.Namespace) -> str:
    if args.labelled is not None:
        data = load_labelled(args.labelled)
    else:
        if not args.dataset.is_file():
            raise SystemExit(f"dataset not found: {args.dataset} (use --dataset or --labelled)")
        data = load_locomo(args.dataset, args.limit, args.seed, args.categories)
    if not data.items:
        raise SystemExit("the labelled set is empty")
    settings = Settings.from_env()
    embedder = build_embedder(settings)
    try:
        rel, irr = await distances(embedder, data)
    finally:
        await embedder.aclose()
    name = f"{settings.embed_provider} ({embedder.name})"
    return report(data, name, rel, irr, threshold_grid(args.step, args.max_threshold), args.min_recall)


def main(argv: Sequence[str] | None = None) -> int:
    print(asyncio.run(run(parse_args(argv))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
