"""The MCP server, driven by the official SDK's own client over both transports, against a real
`haki serve` (tests/helpers/server.py): stdio (`haki mcp`, a bridge to the server's `/mcp`) and
streamable HTTP (`/mcp` on the service). Every tool is called; a key never reaches another
project. The in-process tests at the end run the app's lifespan in the test's loop, on its
connection, to see what a tool call does inside the service."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import asyncpg
import httpx
import httpx2
import msgspec
import pytest
from haki_client import Haki
from litestar import Litestar
from mcp.client.client import Client
from mcp.client.session import ClientSession

from service.api.auth import authenticate, revoke_key
from service.api.deps import in_process
from service.api.mcp_server import (
    INSTRUCTIONS,
    UNKNOWN_OUTCOME,
    ConfigError,
    ReachServer,
    bridge,
    check_endpoint,
    run_stdio,
)
from service.api.memory import get_conflicts, post_facts
from service.api.ratelimit import RateLimiter
from service.app import create_app
from service.constants import MAX_BATCH, MAX_CONTENT_CHARS, MAX_SCOPE_CHARS, MCP_CONTENT_CHARS
from service.context import inspection
from service.db.replica import ReadRouter
from service.embedding.embedder import Embedder
from service.errors import NotFound
from service.ids import uuid7
from service.observability.metrics import Metrics
from service.settings import Settings
from service.structs import MAX_MESSAGE_CHARS, ExtractResponse, FactIn, WriteFactsRequest, WriteFactsResponse
from tests.helpers import PROJECT, assert_error, bearer
from tests.helpers.app import SingleConnectionPool
from tests.helpers.fake_chat import FakeChat, answer, fake_chat
from tests.helpers.mcp_sessions import TRANSPORTS, mcp_in_process, session_on, tool_session
from tests.helpers.server import REPO, Server, free_port, running_server
from tests.helpers.stub_http import serve_posts

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
    "list_facts",
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


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def call(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    text = text_of(result)
    assert not result.is_error, text
    return text


async def call_json(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's structured answer (an object of its output schema), the same as its text in JSON."""
    result = await session.call_tool(tool, arguments)
    text = text_of(result)
    assert not result.is_error, text
    assert isinstance(result.structured_content, dict)
    assert json.loads(text) == result.structured_content
    return result.structured_content


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    return text_of(result)


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
        assert f"- Alice works at Acme as a data engineer. [fact_id: {acme}]" in lines
        assert any("quarterly data pipeline review" in line for line in lines)
        trace_id = lines[-1].removeprefix("trace_id: ")
        trace = await call_json(session, "inspect", trace_id=trace_id)
        assert trace["trace_id"] == trace_id
        assert {d["item_id"] for d in trace["items"] if d["decision"] == "served"} >= {acme}

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
        assert "validation_error" in bad_id and "facts[0].supersedes" in bad_id
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


def test_stdio_refuses_a_pinned_project_the_key_may_not_reach(world: World) -> None:
    """HAKI_PROJECT_ID naming another project than the key's: `haki mcp` started, and every tool
    call was then a 403; it is refused at start, exit 2, as a refused key is."""
    env = {"HAKI_URL": world.server.url, "HAKI_API_KEY": world.key_b, "HAKI_PROJECT_ID": "mcp-a"}
    done = haki_mcp({**world.server.env, **env})
    assert done.returncode == 2, done.stderr
    said = done.stderr.splitlines()[-1]
    assert said.startswith("haki mcp: HAKI_PROJECT_ID='mcp-a' was refused: forbidden: "), said


@pytest.mark.parametrize("tail", ["\n", " ", "\u043a"])
def test_stdio_refuses_a_key_no_header_carries_and_never_prints_it(world: World, tail: str) -> None:
    """A key with a line end (read from a file) or a pasted character was sent, and its refusal
    quoted the whole key on stderr, which MCP clients keep in their logs."""
    done = haki_mcp({**world.server.env, "HAKI_URL": world.server.url, "HAKI_API_KEY": world.key_a + tail})
    assert done.returncode == 2, done.stderr
    assert "HAKI_API_KEY must be visible ASCII characters" in done.stderr
    assert world.key_a not in done.stderr and world.key_a[3:20] not in done.stderr


def haki_mcp(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "mcp"],
        cwd=Path(REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_stdio_refuses_credentials_in_haki_url_and_never_prints_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """httpx sent a URL's user:password@ as Basic auth instead of the key: the server answered
    "refused the key", and the message quoted the password on stderr."""
    for name in ("HAKI_URL", "HAKI_BASE_URL"):
        env = {name: "http://user:s3cretpw@127.0.0.1:9/", "HAKI_API_KEY": "hk_x"}
        assert run_stdio(env) == 2
        said = capsys.readouterr().err
        assert said.startswith(f"haki mcp: {name} holds credentials (user@ or user:password@)"), said
        assert "s3cretpw" not in said and "user" not in said.split("):", 1)[1], said


@pytest.mark.slow
def test_stdio_start_does_not_wait_a_tool_calls_time_for_a_silent_server() -> None:
    """A server that takes the connection and never answers (hung, stopped, a half-open balancer):
    `haki mcp` was silent for the 300 s of a tool call, long after an MCP client gave up on it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        done = haki_mcp({**os.environ, "HAKI_URL": url, "HAKI_API_KEY": "hk_x"})
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 30
    said = done.stderr.splitlines()[-1]
    assert said.startswith(f"haki mcp: HAKI_URL={url} did not answer within 10 s: ReadTimeout"), said
    assert "unknown" not in said  # a ping at start has no outcome to check


def test_stdio_without_a_key_exits_2(world: World) -> None:
    done = haki_mcp({k: v for k, v in world.server.env.items() if k != "HAKI_API_KEY"})
    assert done.returncode == 2
    assert "HAKI_API_KEY" in done.stderr


def test_stdio_checks_the_key_and_the_server_before_serving(world: World) -> None:
    refused = haki_mcp({**world.server.env, "HAKI_URL": world.server.url, "HAKI_API_KEY": "hk_not-a-key"})
    assert refused.returncode == 2
    assert "refused the key" in refused.stderr and "401" in refused.stderr
    nobody = f"http://127.0.0.1:{free_port()}"
    absent = haki_mcp({**world.server.env, "HAKI_URL": nobody, "HAKI_API_KEY": world.key_a})
    assert absent.returncode == 2
    assert f"no Haki server answers at HAKI_URL={nobody}" in absent.stderr


def ok_to_anything(path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    return 200, b"ok"


def ok_but_a_ping(path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """An MCP ping answered as an MCP server would, and the MCP handshake not."""
    if json.loads(body).get("method") == "ping":
        return 200, b'{"jsonrpc": "2.0", "id": 0, "result": {}}'
    return 200, b"ok"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (ok_to_anything, "is not a Haki MCP server: it answered an MCP ping with 'ok'"),
        (ok_but_a_ping, "did not complete the MCP handshake: Failed to parse JSON response"),
    ],
)
def test_stdio_exits_2_when_haki_url_is_not_haki(
    world: World, answer: Callable[[str, dict[str, str], bytes], tuple[int, bytes]], reason: str
) -> None:
    # The reason on one line, not the SDK client's exception group.
    with serve_posts(answer) as port:
        done = haki_mcp(
            {**world.server.env, "HAKI_URL": f"http://127.0.0.1:{port}", "HAKI_API_KEY": world.key_a}
        )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    said = done.stderr.splitlines()[-1]
    assert said.startswith(f"haki mcp: http://127.0.0.1:{port}/mcp ") and reason in said, said


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


# --- in process: what a tool call does inside the service -------------------------------------------


def routes_requested(app: Litestar) -> set[str]:
    metrics: Metrics = app.state.metrics
    return {
        sample.labels["route"]
        for family in metrics.registry.collect()
        if family.name == "haki_http_request_duration_seconds"
        for sample in family.samples
        if sample.name.endswith("_count")
    }


async def test_a_tool_calls_the_service_not_the_http_api(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with tool_session(settings, conn, hash_embedder, key) as (app, session):
        written = await call(
            session,
            "remember",
            subject_id="maya",
            facts=[{"content": "Maya works at Lyon Sud.", "key": "employer"}],
        )
        # The answer is the route's own response body.
        fact = msgspec.json.decode(written, type=WriteFactsResponse).facts[0]
        assert fact.status == "active"
        recalled = await call(session, "recall", subject_id="maya", query="Where does Maya work?")
        assert f"- Maya works at Lyon Sud. [fact_id: {fact.fact_id}]" in recalled.splitlines()
        metrics: Metrics = app.state.metrics
        served = metrics.registry.get_sample_value(
            "haki_context_calls_total", {"status": "ok", "profile": "unified"}
        )
        assert served is not None and served >= 1  # counted as the route counts it
        # Nothing but /mcp itself went through the HTTP stack: no request to /v1/facts or /v1/context.
        routes = routes_requested(app)
        assert routes and not any(route.startswith("/v1/") for route in routes), routes

        # The routes' Structs check the arguments and name the field, as the API does.
        # record_event's own name of the field, in the Struct's errors and the service's alike.
        naive = await call_error(
            session, "record_event", subject_id="maya", content="x", occurred_at="2026-11-20T10:00:00"
        )
        assert naive.startswith("validation_error: occurred_at: ") and "events[0]" not in naive, naive
        late = await call_error(
            session, "record_event", subject_id="maya", content="x", occurred_at="9999-12-31T23:59:59-14:00"
        )
        assert late.startswith("validation_error: occurred_at: is out of range"), late
        assert "events[0]" not in late
        nul = await call_error(session, "forget", subject_id="ma\x00ya")
        assert "validation_error: subject_id" in nul
        garbage = await call_error(session, "inspect", trace_id="garbage")
        assert "validation_error: trace_id" in garbage
        kept = await call_error(
            session, "resolve_conflict", conflict_set_id="00000000-0000-0000-0000-000000000000", keep=["nope"]
        )
        assert "validation_error: keep[0]" in kept


async def test_tool_calls_spend_the_keys_rate_limit(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with tool_session(settings, conn, hash_embedder, key) as (app, session):
        app.state.rate_limiter = RateLimiter(2)
        assert len((await session.list_tools()).tools) == len(TOOLS)  # not a call of the API
        for _ in range(2):
            await call(session, "list_conflicts", subject_id="maya")
        limited = await call_error(session, "list_conflicts", subject_id="maya")
        assert "rate_limited: Rate limit of 2 requests per minute" in limited


# Arguments each tool accepts, to see what else refuses a call.
SOME_ID = "0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f"
VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "recall": {"subject_id": "maya", "query": "What does Maya do?"},
    "remember": {"subject_id": "maya", "facts": [{"content": "Maya is a nurse."}]},
    "record_event": {"subject_id": "maya", "content": "Maya started a night shift."},
    "list_facts": {"subject_id": "maya"},
    "list_conflicts": {"subject_id": "maya"},
    "resolve_conflict": {"conflict_set_id": SOME_ID, "keep": [SOME_ID]},
    "inspect": {"trace_id": SOME_ID},
    "remember_messages": {"subject_id": "maya", "messages": [{"role": "user", "content": "Hi."}]},
    "forget": {"subject_id": "maya"},
}


async def test_the_pinned_project_is_checked_by_every_tool(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    # `haki mcp` passes HAKI_PROJECT_ID as ?project_id=: another project than the key's is refused
    # by each tool (the model reads why), not by the handshake; inspect and resolve_conflict too,
    # whose routes take no project but the key's.
    assert set(VALID_ARGUMENTS) == TOOLS
    async with tool_session(settings, conn, hash_embedder, key, "?project_id=proj-b") as (_, session):
        for tool, arguments in VALID_ARGUMENTS.items():
            refused = await call_error(session, tool, **arguments)
            assert refused == "forbidden: This API key belongs to another project. (field project_id)", tool
    async with mcp_in_process(settings, conn, hash_embedder, key, "?project_id=") as (_, http, url):
        r = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert r.status_code == 400 and r.json()["code"] == "validation_error", r.text
    async with tool_session(settings, conn, hash_embedder, key, "?project_id=proj-a") as (_, session):
        await call(session, "remember", subject_id="maya", facts=[{"content": "Maya is a nurse."}])


# Arguments the route would refuse, which pydantic's lax mode read as something else (a number
# as a date, `true` as 1, "900" as 900, "yes" as true) or ignored (an argument outside the schema),
# and the argument each error names.
REFUSED_ARGUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("remember", {"facts": [{"content": "x", "valid_from": 2024}]}, "facts[0].valid_from"),
    ("remember", {"facts": [{"content": "x", "valid_to": "2024"}]}, "facts[0].valid_to"),
    ("record_event", {"content": "x", "occurred_at": 2024}, "occurred_at"),
    (
        "remember_messages",
        {"messages": [{"role": "user", "content": "x", "occurred_at": 1.5}]},
        "messages[0].occurred_at",
    ),
    ("remember_messages", {"write": "false"}, "write"),
    ("recall", {"budget_tokens": True}, "budget_tokens"),
    ("recall", {"budget_tokens": "900"}, "budget_tokens"),
    ("list_facts", {"limit": 5.0}, "limit"),
    ("inspect", {"scores": "yes"}, "scores"),
    ("recall", {"project_id": "proj-b"}, "project_id"),
    ("forget", {"everything": True}, "everything"),
]


async def test_arguments_the_route_refuses_are_refused(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    async with tool_session(settings, conn, hash_embedder, key) as (_, session):
        for tool, wrong, field in REFUSED_ARGUMENTS:
            refused = await call_error(session, tool, **{**VALID_ARGUMENTS[tool], **wrong})
            assert refused.startswith(f"validation_error: {field}: "), (tool, wrong, refused)
        # Nothing was written from them, and the schema says so: no argument outside it.
        assert (await call(session, "recall", **VALID_ARGUMENTS["recall"])).startswith("trace_id: ")
        for listed in (await session.list_tools()).tools:
            assert listed.input_schema["additionalProperties"] is False, listed.name
        # An unknown tool is an error with a code too, and the tools the model can call.
        unknown = await call_error(session, "nonexistent_tool")
        assert unknown.startswith("not_found: No tool named 'nonexistent_tool'; the tools are recall, ")


@dataclass(frozen=True)
class Bridged:
    """`haki mcp`'s server (`bridge`) in process: `client` talks to it, and it to the `app`'s /mcp
    (`url`) through `reach` (ReachServer; its `inner` transport is the app's, `asgi`, until a test
    swaps it) with `http`, the key's client."""

    app: Litestar
    client: Client
    reach: ReachServer
    asgi: httpx2.AsyncBaseTransport
    http: httpx2.AsyncClient
    url: str


@asynccontextmanager
async def bridged(
    settings: Settings, conn: asyncpg.Connection, embedder: Embedder, key: str
) -> AsyncIterator[Bridged]:
    async with mcp_in_process(settings, conn, embedder, key) as (app, _, url):
        asgi = httpx2.ASGITransport(app=cast(Any, app))
        reach = ReachServer("http://haki.test", inner=asgi)
        async with (
            httpx2.AsyncClient(transport=reach, headers=bearer(key)) as http,
            session_on(http, url) as remote,
            Client(bridge(remote)) as client,
        ):
            yield Bridged(app, client, reach, asgi, http, url)


async def test_the_stdio_bridge_forwards_to_mcp_and_outlives_the_server(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """`haki mcp`'s server (`bridge`) in process, on a client of the app's /mcp: a request that
    finds no server is a tool error, and the next one, the server back, works again."""

    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("All connection attempts failed", request=request)

    async with bridged(settings, conn, hash_embedder, key) as b:
        await check_endpoint(b.http, "http://haki.test", b.url)
        assert {t.name for t in (await b.client.list_tools()).tools} == TOOLS
        assert b.client.session.instructions == INSTRUCTIONS
        await b.client.call_tool(
            "remember", {"subject_id": "maya", "facts": [{"content": "Maya is a nurse."}]}
        )
        b.reach.inner = httpx2.MockTransport(refuse)
        gone = await b.client.call_tool("recall", {"subject_id": "maya", "query": "What does Maya do?"})
        assert gone.is_error and text_of(gone).startswith(
            "unavailable: no Haki server answers at HAKI_URL=http://haki.test"
        )
        with pytest.raises(ConfigError, match="no Haki server answers"):
            await check_endpoint(b.http, "http://haki.test", b.url)
        b.reach.inner = b.asgi
        back = await b.client.call_tool("recall", {"subject_id": "maya", "query": "What does Maya do?"})
        assert not back.is_error and "- Maya is a nurse. [fact_id: " in text_of(back)


class SentThenCut(httpx2.AsyncBaseTransport):
    """A tool call carried out by the server, whose answer is then lost (a balancer or the network
    cutting the connection, a read time-out on a slow write)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if json.loads(request.content).get("method") != "tools/call":
            return response
        raise httpx2.RemoteProtocolError("Server disconnected without sending a response.", request=request)


async def test_the_stdio_bridge_says_a_lost_answer_is_an_unknown_outcome(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """The write was stored, and the tool error said "no Haki server answers": the model retried
    and the fact was stored twice. Only a failure before the send says so now."""
    async with bridged(settings, conn, hash_embedder, key) as b:
        b.reach.inner = SentThenCut(b.asgi)
        fact = {"content": "Maya works at Lyon Sud.", "key": "employer"}
        lost = await b.client.call_tool("remember", {"subject_id": "maya", "facts": [fact]})
        said = text_of(lost)
        assert lost.is_error and said.startswith(
            "unavailable: HAKI_URL=http://haki.test broke the connection after the request was sent: "
            "RemoteProtocolError("
        ), said
        assert "no Haki server answers" not in said
        assert said.endswith(UNKNOWN_OUTCOME), said
        assert "unknown: before repeating a write, check with list_facts" in said
        b.reach.inner = b.asgi
        listed = await b.client.call_tool("list_facts", {"subject_id": "maya"})
        assert isinstance(listed.structured_content, dict)
        assert [f["content"] for f in listed.structured_content["facts"]] == [fact["content"]]


async def test_the_stdio_bridge_ends_a_call_answered_with_another_id(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """The SDK's client drops an answer whose JSON-RPC id is not its request's: the tool call
    waited for ever (a caching or misrouting gateway, another server at HAKI_URL)."""

    def another_id(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"jsonrpc": "2.0", "id": 999, "result": {}})

    async with bridged(settings, conn, hash_embedder, key) as b:
        b.reach.inner = httpx2.MockTransport(another_id)
        with anyio.fail_after(20):
            answered = await b.client.call_tool("list_conflicts", {"subject_id": "maya"})
        assert answered.is_error
        assert text_of(answered) == f"unavailable: {b.url} answered another request's id (999) with HTTP 200"


async def test_the_stdio_bridge_starts_when_the_pin_check_is_rate_limited(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """A key busy with other agents at start: the pin check's 429 was reported as the pin refused,
    and the bridge exited (MCP clients do not restart it). A refused pin still stops it."""
    async with bridged(settings, conn, hash_embedder, key) as b:
        b.app.state.rate_limiter = RateLimiter(1)
        assert (await b.http.get("http://haki.test/v1/facts", params={"subject_id": "x"})).status_code == 200
        warning = await check_endpoint(b.http, "http://haki.test", b.url, PROJECT)
        assert warning is not None and warning.startswith(
            f"HAKI_PROJECT_ID={PROJECT!r} was not checked at start, the server is busy or rate "
            "limiting the key (rate_limited: Rate limit of 1 requests per minute"
        ), warning
        assert warning.endswith("; every tool call checks it")
        b.app.state.rate_limiter = RateLimiter(100)
        assert await check_endpoint(b.http, "http://haki.test", b.url, PROJECT) is None
        with pytest.raises(ConfigError, match="HAKI_PROJECT_ID='proj-b' was refused: forbidden: "):
            await check_endpoint(b.http, "http://haki.test", b.url, "proj-b")


async def test_the_stdio_bridge_reads_every_refusal_as_a_code(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """A key revoked mid-session, or another server's error page, is a tool error `<code>: ...`
    over the bridge (the SDK's client reads a non-2xx answer as "Server returned an error
    response"); a server answering 200 to anything is refused before the bridge serves."""

    def error_page(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(502, text="<html>\n<h1>Bad Gateway</h1>\n</html>")

    def anything_ok(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, text="ok")

    async with bridged(settings, conn, hash_embedder, key) as b:
        # Through the app's pool: the test's connection is the app's, lent to one task at a time.
        async with b.app.state.pool.acquire() as lent:
            assert await revoke_key(lent, key)
        revoked = await b.client.call_tool("list_conflicts", {"subject_id": "maya"})
        assert revoked.is_error and text_of(revoked).startswith("unauthorized: Unknown or revoked API key (")
        b.reach.inner = httpx2.MockTransport(error_page)
        gateway = await b.client.call_tool("list_conflicts", {"subject_id": "maya"})
        assert gateway.is_error
        assert (
            text_of(gateway) == f"unavailable: {b.url} answered HTTP 502 <html> <h1>Bad Gateway</h1> </html>"
        )
        b.reach.inner = httpx2.MockTransport(anything_ok)
        with pytest.raises(ConfigError, match="is not a Haki MCP server: it answered an MCP ping with 'ok'"):
            await check_endpoint(b.http, "http://haki.test", b.url)


async def test_tool_calls_follow_the_read_routing_of_the_routes(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """`in_process`, what every tool runs through, with a read router whose standby is the test's
    own database: reads lease the standby and are run again on the primary where a read route's
    would be; writes run on the primary and are noted for read-your-writes."""
    pool = SingleConnectionPool(conn)
    routed = msgspec.structs.replace(settings, database_read_url=settings.database_url)
    app = create_app(routed, pool=pool, embedder=hash_embedder)
    router: ReadRouter = app.state.read_router
    router.primary_pool = router.read_pool = pool
    router.state, router.last_ok = "ok", time.monotonic()
    metrics: Metrics = app.state.metrics

    def sample(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    principal = await authenticate(conn, f"Bearer {key}")
    with pytest.raises(NotFound):  # found on neither: asked of the standby, then of the primary
        await in_process(
            app, principal, lambda deps: inspection.inspect(deps.conn, deps.principal, uuid7()), reads=True
        )
    assert sample("haki_read_replica_fallbacks_total", reason="not_found") == 1
    assert sample("haki_read_requests_total", pool="replica") == 0  # counted by the pool that answered
    assert sample("haki_read_requests_total", pool="primary") == 1

    data = WriteFactsRequest(subject_id="maya", facts=[FactIn(content="Maya is a nurse.")])
    await in_process(app, principal, lambda deps: post_facts(deps, data))
    assert router.stale(PROJECT, "maya")  # noted: the standby has not replayed it
    listed = await in_process(
        app, principal, lambda deps: get_conflicts(deps, PROJECT, "maya", "open"), reads=True
    )
    assert listed.conflicts == []
    assert sample("haki_read_replica_fallbacks_total", reason="unreplayed_write") == 1


async def test_tools_that_list_many_memories_cut_each_text(
    settings: Settings, conn: asyncpg.Connection, hash_embedder: Embedder, key: str
) -> None:
    """`inspect` and `list_conflicts` answer a model: a memory's text is cut to MCP_CONTENT_CHARS
    (an 8,000-character fact is not repeated whole for every decision or member)."""
    long_a, long_b = "Maya lives in Lyon. " + "a" * 2000, "Maya lives in Oslo. " + "b" * 2000
    async with tool_session(settings, conn, hash_embedder, key) as (_, session):
        await call(session, "remember", subject_id="long", facts=[{"content": "Maya reads. " + "c" * 2000}])
        await call(
            session, "remember", subject_id="long",
            facts=[{"content": long_a, "key": "city"}, {"content": long_b, "key": "city"}],
        )  # fmt: skip
        recalled = await session.call_tool("recall", {"subject_id": "long", "query": "What does Maya read?"})
        assert isinstance(recalled.structured_content, dict)
        explained = await call_json(session, "inspect", trace_id=recalled.structured_content["trace_id"])
        contents = [i["content"] for i in explained["items"]]
        assert len(contents) == 3
        assert all(len(c) == MCP_CONTENT_CHARS and c.endswith("\u2026") for c in contents), contents
        listed = await call_json(session, "list_conflicts", subject_id="long")
        (members,) = [c["members"] for c in listed["conflicts"]]
        assert sorted(m["content"] for m in members) == [
            long_a[: MCP_CONTENT_CHARS - 1] + "\u2026",
            long_b[: MCP_CONTENT_CHARS - 1] + "\u2026",
        ]
        # list_facts too: a page of 50 such facts was 400k characters, whole.
        facts = (await call_json(session, "list_facts", subject_id="long", status="any"))["facts"]
        assert len(facts) == 3
        assert all(len(f["content"]) == MCP_CONTENT_CHARS for f in facts), facts
        assert long_a[: MCP_CONTENT_CHARS - 1] + "\u2026" in [f["content"] for f in facts]


def test_input_schemas_carry_the_routes_bounds() -> None:
    """A model reads a tool's bounds from its schema: the route's own (content, key, message
    length, keep's size), while the route's Struct still checks them and names the field."""
    import anyio

    from service.api.mcp_server import build_server

    schemas = {t.name: t.input_schema for t in anyio.run(build_server().list_tools)}
    defs = schemas["remember"]["$defs"]["FactItem"]["properties"]
    assert (defs["content"]["minLength"], defs["content"]["maxLength"]) == (1, MAX_CONTENT_CHARS)
    assert defs["key"]["maxLength"] == MAX_SCOPE_CHARS
    message = schemas["remember_messages"]["$defs"]["MessageItem"]["properties"]["content"]
    assert message["maxLength"] == MAX_MESSAGE_CHARS
    assert schemas["resolve_conflict"]["properties"]["keep"]["maxItems"] == MAX_BATCH
