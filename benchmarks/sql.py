"""Loads the benchmark-only statements of benchmarks/sql/*.sql (aiosql, asyncpg adapter).

They never ship and never load into the production `Queries` object (service/db/sql.py): bulk-load
helpers, the score-every-fact baseline, EXPLAIN helpers and the GIN index modes, run on a
throw-away benchmark database only.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import aiosql

SQL_DIR = Path(__file__).resolve().parent / "sql"


@cache
def load_bench_queries() -> Any:
    return aiosql.from_path(SQL_DIR, "asyncpg")
