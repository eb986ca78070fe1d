"""migrations/schema.sql shows the schema as the migrations leave it, and is never stale."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from service.db.migrations import SCHEMA_SNAPSHOT, discover
from service.settings import Settings
from tests.helpers import load_file_module

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration  # pg_dump runs as a process


def schema_dump() -> ModuleType:
    return load_file_module("schema_dump", REPO / "scripts" / "schema_dump.py")


async def test_schema_snapshot_is_what_the_migrations_build(settings: Settings, migrated: str) -> None:
    assert settings.database_url is not None
    fresh = await schema_dump().fresh_schema(settings.database_url)
    snapshot = (REPO / "migrations" / SCHEMA_SNAPSHOT).read_text(encoding="utf-8")
    assert snapshot == fresh, "migrations/schema.sql is stale: run `just schema` (scripts/schema_dump.py)"
    # The snapshot names every table a migration creates, and the runner never applies it.
    assert "CREATE TABLE public.facts" in snapshot and "CREATE TABLE public.context_calls" in snapshot
    assert SCHEMA_SNAPSHOT not in {m.path.name for m in discover()}
