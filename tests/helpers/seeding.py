"""Server-side seeding of big scopes (random unit embeddings), for the scale and index-use tests.

The facts are written inside the test's rolled-back transaction, the HNSW index dropped for the
seed and rebuilt in one pass, then ANALYZE, so the planner sees the table it would see in
production.
"""

from __future__ import annotations

import asyncpg
import numpy as np

from service.constants import WEIGHT_RECENCY, WEIGHT_SIMILARITY, WEIGHT_TEXT_RANK
from tests.helpers import PROJECT
from tests.helpers.sql import load_test_queries

WEIGHTS = (WEIGHT_SIMILARITY, WEIGHT_TEXT_RANK, WEIGHT_RECENCY)


async def seed_scopes(conn: asyncpg.Connection, scopes: dict[str, tuple[int, str]]) -> None:
    """Seeds {subject_id: (n, content_prefix)} in PROJECT, then rebuilds the index and ANALYZEs."""
    q = load_test_queries()
    await q.test_prepare_bulk_load(conn)
    await q.test_drop_fact_vector_index(conn)
    for subject_id, (n, prefix) in scopes.items():
        await q.test_seed_random_facts(
            conn, project_id=PROJECT, subject_id=subject_id, n=n, content_prefix=prefix
        )
    await q.test_restore_fact_vector_index(conn)
    await q.test_analyze_facts(conn)


def random_unit_vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=384)
    return (v / np.linalg.norm(v)).astype(np.float32)
