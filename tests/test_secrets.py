"""API keys: stored as sha256 only, compared in constant time, never logged, revoked at once."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from service.api import auth
from service.embedding.embedder import Embedder
from service.memory import writes as memory
from service.repository import keys as keys_repo
from service.settings import Settings
from tests.helpers import PROJECT, bearer
from tests.helpers.app import pooled_client
from tests.helpers.sql import load_test_queries

REPO = Path(__file__).resolve().parent.parent


async def test_only_the_sha256_of_a_key_is_stored(conn: asyncpg.Connection) -> None:
    project = f"sec-{uuid.uuid4().hex[:8]}"
    key_id, key = await auth.create_key(conn, project)
    rows = [dict(r) async for r in load_test_queries().test_stored_key_hashes(conn, project_id=project)]
    assert rows == [{"key_id": key_id, "key_hash": hashlib.sha256(key.encode()).digest()}]
    secret = key.removeprefix(auth.KEY_PREFIX).encode()
    assert secret not in rows[0]["key_hash"]
    listed = await keys_repo.list_api_keys(conn, project)
    assert all("key_hash" not in r for r in listed) and key not in repr(listed)


async def test_keys_are_compared_in_constant_time(
    conn: asyncpg.Connection, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    principal = await auth.authenticate(conn, f"Bearer {key}")
    assert principal.project_id == PROJECT
    digest = hashlib.sha256(key.encode()).digest()
    assert (digest, digest) in calls


LOG_CALL = re.compile(
    r"\b(?:log|logger|logging)\.(?:debug|info|warning|error|exception|critical)\((?P<args>.*)"
)


def test_no_log_call_in_the_service_mentions_a_key_or_header() -> None:
    offenders = []
    for path in sorted((REPO / "service").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = LOG_CALL.search(line)
            if m and re.search(r"authorization|headers|token|\bkey\b|api_key", m.group("args"), re.I):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, offenders


@pytest.fixture
def capture_everything(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    for name in ("", "haki", "litestar", "uvicorn", "uvicorn.access", "asyncpg", "httpx"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


async def test_requests_with_a_key_log_nothing_of_it(
    client: httpx.AsyncClient,
    key: str,
    capture_everything: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unknown = auth.new_key()
    headers = bearer(key)
    fact = {"project_id": PROJECT, "subject_id": "sec", "facts": [{"content": "Alice"}]}
    await client.post("/v1/facts", json=fact, headers=headers)  # 201
    await client.get("/v1/facts", params={"project_id": "proj-b"}, headers=headers)  # 403
    await client.get(f"/v1/facts/{uuid.uuid4()}", headers=headers)  # 404
    await client.post("/v1/context", json={"project_id": PROJECT}, headers=headers)  # 400
    await client.get("/v1/facts", params={"project_id": PROJECT}, headers=bearer(unknown))  # 401
    await client.get("/v1/facts", params={"project_id": PROJECT}, headers={"Authorization": key})  # 401

    async def database_gone(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionResetError("connection reset by peer")

    async def bug(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("an unexpected bug")

    monkeypatch.setattr(memory, "store_facts", database_gone)
    assert (await client.post("/v1/facts", json=fact, headers=headers)).status_code == 503  # logged
    monkeypatch.setattr(memory, "store_facts", bug)
    assert (await client.post("/v1/facts", json=fact, headers=headers)).status_code == 500  # logged

    records = capture_everything.records
    assert any(r.levelno >= logging.WARNING for r in records)  # the capture did see the errors
    secrets = [key, key.removeprefix(auth.KEY_PREFIX), unknown, unknown.removeprefix(auth.KEY_PREFIX)]
    for record in records:
        text = record.getMessage() + (
            logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        )
        for secret in secrets:
            assert secret not in text, (record.name, text)
    assert all(secret not in capture_everything.text for secret in secrets)


# --- `haki keys revoke` takes effect on the next request ----------------------------------------


@pytest.fixture
async def pooled(
    settings: Settings, migrated: str, hash_embedder: Embedder
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async with pooled_client(settings, hash_embedder) as client_and_pool:
        yield client_and_pool


async def haki(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    assert settings.database_url is not None
    env.update(HAKI_DATABASE_URL=settings.database_url, HAKI_EMBED_PROVIDER="hash")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.integration
async def test_cli_revocation_refuses_the_very_next_request(
    settings: Settings, pooled: tuple[httpx.AsyncClient, Any]
) -> None:
    client, pool = pooled
    project = f"rev-{uuid.uuid4().hex[:8]}"
    async with pool.acquire() as c:
        _, doomed = await auth.create_key(c, project)
        survivor_id, survivor = await auth.create_key(c, project)
        by_id, doomed_by_id = await auth.create_key(c, project)
    params = {"project_id": project}
    for k in (doomed, survivor, doomed_by_id):
        assert (await client.get("/v1/facts", params=params, headers=bearer(k))).status_code == 200

    code, out, err = await haki(settings, "keys", "revoke", doomed)
    assert code == 0, err
    assert doomed not in out + err  # the CLI does not echo the key back either
    r = await client.get("/v1/facts", params=params, headers=bearer(doomed))
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"

    code, _, err = await haki(settings, "keys", "revoke", str(by_id), "--project", project)
    assert code == 0, err
    assert (await client.get("/v1/facts", params=params, headers=bearer(doomed_by_id))).status_code == 401
    # The project's other key is untouched.
    assert (await client.get("/v1/facts", params=params, headers=bearer(survivor))).status_code == 200
    assert survivor_id != by_id
