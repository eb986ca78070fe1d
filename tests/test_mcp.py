"""The MCP server, driven by the official SDK's own client over both transports, against a real
`haki serve` (tests/helpers/server.py): stdio (`haki mcp`, talking to the server over HTTP) and
streamable HTTP (`/mcp` on the service). Every tool is called; a key never reaches another
project."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import msgspec
import pytest
from haki_client import Haki
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from service.structs import ExtractResponse
from tests.helpers import assert_error, bearer
from tests.helpers.fake_chat import FakeChat, answer, fake_chat
from tests.helpers.server import REPO, Server, running_server

# Starts `haki serve` and `haki mcp` subprocesses.
pytestmark = pytest.mark.integration

TOOLS = {
    "recall",
    "remember",
    "record_event",
    "list_conflicts",
    "resolve_conflict",
    "inspect",
    "remember_messages",
    "forget",
}


@dataclass(frozen=True)
class World:
    server: Server
    chat: FakeChat
    key_a: str
    key_b: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with fake_chat() as chat:
        extract_env = {"HAKI_EXTRACT_BASE_URL": chat.url, "HAKI_EXTRACT_MODEL": "fake-model"}
        with running_server(tmp_path_factory.mktemp("mcp"), **extract_env) as server:
            yield World(server, chat, server.create_key("mcp-a"), server.create_key("mcp-b"))


@asynccontextmanager
async def over_http(server: Server, key: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60.0) as http,
        streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(server: Server, key: str, **env: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.cli", "mcp"],
        cwd=str(REPO),
        env={"HAKI_URL": server.url, "HAKI_API_KEY": key, **env},
    )
    async with (
        stdio_client(params, errlog=sys.stderr) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


TRANSPORTS = {"http": over_http, "stdio": over_stdio}


async def call(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, text
    return text


async def call_json(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's answer that is a JSON document, decoded."""
    return json.loads(await call(session, tool, **arguments))


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    return "".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_tool(world: World, transport: str) -> None:
    subject = f"alice-{transport}"
    async with TRANSPORTS[transport](world.server, world.key_a) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert set(listed) == TOOLS
        # Descriptions are written for a model: facts versus events, and when to pass a key.
        described = listed["remember"].description or ""
        assert "record_event" in described
        assert "key" in described and "conflict" in described
        # Each fact's fields are typed and described in the input schema the model reads.
        schema = json.dumps(listed["remember"].input_schema)
        assert "Slot name" in schema and '"volatile"' in schema

        written = await call_json(
            session,
            "remember",
            subject_id=subject,
            facts=[
                {"content": "Alice works at Acme as a data engineer.", "key": "employer"},
                {"content": "Alice is vegetarian."},
            ],
        )
        acme = written["facts"][0]["fact_id"]
        await call(
            session,
            "record_event",
            subject_id=subject,
            content="Alice presented the quarterly data pipeline review.",
            occurred_at="2026-11-20T10:00:00+00:00",
        )
        recalled = await call(session, "recall", subject_id=subject, query="Where does Alice work?")
        lines = recalled.splitlines()
        assert lines[0] == "<haki_memory>"
        assert "- Alice works at Acme as a data engineer." in lines
        assert any("quarterly data pipeline review" in line for line in lines)
        trace_id = lines[-1].removeprefix("trace_id: ")
        trace = await call_json(session, "inspect", trace_id=trace_id)
        assert trace["trace_id"] == trace_id
        assert {d["item_id"] for d in trace["decisions"] if d["decision"] == "included"} >= {acme}

        # A second employer with the same key opens a conflict; recall says facts are held back.
        second = await call_json(
            session,
            "remember",
            subject_id=subject,
            facts=[{"content": "Alice works at Globex.", "key": "employer"}],
        )
        conflict_id = second["facts"][0]["conflict_set_id"]
        assert conflict_id
        held = await call(session, "recall", subject_id=subject, query="Where does Alice work?")
        assert "open_conflict" in held
        conflicts = await call_json(session, "list_conflicts", subject_id=subject)
        assert [c["conflict_set_id"] for c in conflicts["conflicts"]] == [conflict_id]
        globex = second["facts"][0]["fact_id"]
        resolved = await call_json(session, "resolve_conflict", conflict_set_id=conflict_id, keep=[globex])
        assert resolved["status"] == "resolved"

        world.chat.then(answer({"content": "Alice lives in Berlin.", "key": "city", "source_message": 0}))
        extracted = await call_json(
            session,
            "remember_messages",
            subject_id=subject,
            messages=[{"role": "user", "content": "I moved to Berlin last month."}],
        )
        assert extracted["written"] is True and extracted["facts"][0]["key"] == "city"
        assert len(extracted["events"]) == 1

        # forget erases the subject: recall has nothing left, a second forget erases nothing.
        erased = await call_json(session, "forget", subject_id=subject)
        assert erased["facts"] == 4 and erased["events"] == 2 and erased["conflict_sets"] == 1
        gone = await call(session, "recall", subject_id=subject, query="Where does Alice work?")
        assert "<haki_memory>" not in gone and gone.startswith("trace_id: ")
        assert (await call_json(session, "forget", subject_id=subject))["facts"] == 0

        # Errors come back as tool errors the model can read, naming the problem.
        bad = await call_error(session, "remember", subject_id=subject, facts=[{"content": ""}])
        assert "validation_error" in bad and "facts[0].content" in bad
        bad_id = await call_error(
            session, "remember", subject_id=subject, facts=[{"content": "x", "supersedes": "nope"}]
        )
        assert "validation_error" in bad_id
        missing = await call_error(session, "inspect", trace_id="0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f")
        assert "not_found" in missing


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_key_never_reaches_another_project(world: World, transport: str) -> None:
    subject = f"secret-{transport}"
    with Haki(world.server.url, world.key_a, project_id="mcp-a") as a:
        fact = a.write_facts(subject, ["The launch code is 0000."]).facts[0].fact_id
        packet = a.context(subject, "What is the launch code?")
    async with TRANSPORTS[transport](world.server, world.key_b) as session:
        # Project b's recall of the same subject id is its own, empty, memory.
        recalled = await call(session, "recall", subject_id=subject, query="What is the launch code?")
        assert "0000" not in recalled and "<haki_memory>" not in recalled
        # Project a's trace and conflict ids are not found with project b's key.
        missing = await call_error(session, "inspect", trace_id=str(packet.trace_id))
        assert "not_found" in missing
        assert "0000" not in missing
        conflicts = await call_json(session, "list_conflicts", subject_id=subject)
        assert conflicts["conflicts"] == []
        superseding = await call_error(
            session,
            "remember",
            subject_id=subject,
            facts=[{"content": "The launch code is 1234.", "supersedes": str(fact)}],
        )
        assert "validation_error" in superseding
        # Project b forgetting the same subject id erases its own (empty) memory, not a's.
        assert (await call_json(session, "forget", subject_id=subject))["facts"] == 0
    with Haki(world.server.url, world.key_a, project_id="mcp-a") as a:
        assert a.get_fact(fact).status == "active"


def test_http_transport_needs_a_key(world: World) -> None:
    for headers in ({}, {"Authorization": "Bearer hk_not-a-key"}):
        r = httpx.post(
            f"{world.server.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream", **headers},
        )
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")


async def test_stdio_pins_the_project_it_is_given(world: World) -> None:
    # HAKI_PROJECT_ID naming another project than the key's: every call is a 403 the model reads.
    async with over_stdio(world.server, world.key_b, HAKI_PROJECT_ID="mcp-a") as session:
        refused = await call_error(session, "recall", subject_id="alice-http", query="Where does Alice work?")
        assert "forbidden" in refused


def test_stdio_without_a_key_exits_2(world: World) -> None:
    env = {k: v for k, v in world.server.env.items() if k != "HAKI_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "mcp"],
        cwd=Path(REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert "HAKI_API_KEY" in done.stderr


def test_sync_sdk_extract_dry_run(world: World) -> None:
    world.chat.then(answer({"content": "Bob drinks tea.", "source_message": 0}))
    with Haki(world.server.url, world.key_a, project_id="mcp-a") as a:
        result = a.extract("bob", [{"role": "user", "content": "I only drink tea."}], write=False)
    assert result.written is False
    assert [f.content for f in result.facts] == ["Bob drinks tea."]
    assert result.facts[0].fact_id is None


def readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    return text[start : text.find("\n## ", start + 1)]


def fenced(text: str, lang: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S) if m.group(1) == lang]


def test_readme_mcp_configs_start_haki_mcp_or_reach_mcp() -> None:
    stdio, http = (
        json.loads(block)["mcpServers"]["haki"] for block in fenced(readme_section("MCP server"), "json")
    )
    assert stdio["command"].endswith("/.venv/bin/haki") and stdio["args"] == ["mcp"]
    assert set(stdio["env"]) == {"HAKI_URL", "HAKI_API_KEY"}
    assert http["url"].endswith("/mcp") and http["headers"]["Authorization"].startswith("Bearer hk_")


@pytest.mark.skipif(shutil.which("curl") is None, reason="the example uses curl")
def test_readme_extraction_example_runs(world: World) -> None:
    section = readme_section("Extraction")
    (shown,) = fenced(section, "json")
    msgspec.json.decode(shown, type=ExtractResponse)  # the output shown is the contract's
    (command,) = fenced(section, "bash")
    world.chat.then(answer({"content": "Alice is vegetarian.", "key": "diet", "source_message": 2}))
    done = subprocess.run(
        ["bash", "-c", command.replace("http://127.0.0.1:8000", world.server.url)],
        env={**os.environ, "HAKI_API_KEY": world.key_a},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = msgspec.json.decode(done.stdout, type=ExtractResponse)
    assert out.written and [f.key for f in out.facts] == ["diet"] and len(out.events) == 3
    assert (
        world.chat.user_payload()["messages"][0]["content"]
        == "I left Acme, I'm a data engineer at Globex now."
    )


async def test_mcp_before_the_lifespan_is_503(client: httpx.AsyncClient, key: str) -> None:
    # An app whose lifespan has not run (the in-process test clients) has no MCP server built.
    r = await client.post(
        "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=bearer(key)
    )
    assert_error(r, 503, "unavailable")
