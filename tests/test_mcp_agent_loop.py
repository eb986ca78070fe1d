"""The agent's loop over MCP without dead ends, driven by the official SDK's client.

Over both transports against a real `haki serve` (stdio: `haki mcp`; streamable HTTP: `/mcp`):
a fact recalled in one session is superseded in a fresh one by the id `recall` showed; ids are
read as `recall` prints them; every tool carries its hints and an output schema, and answers an
object of it. In process: arguments generated from each tool's own input schema, of wrong types
or garbage, never give an error without a reason naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import asyncpg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from mcp.client.session import ClientSession

from service.embedding.embedder import Embedder
from service.settings import Settings
from tests.helpers.mcp_sessions import TRANSPORTS, tool_session
from tests.helpers.server import Server, running_server

READ_ONLY = {"recall", "list_facts", "list_conflicts", "inspect"}
FACT_ID = re.compile(r"\[fact_id: (?P<id>[0-9a-f-]{36})\]")
UUID_TEXT = "0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f"


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def structured(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def error_of(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    return text_of(result)


# --- over both transports, against a real server ------------------------------------------------


@dataclass(frozen=True)
class World:
    server: Server
    key: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_server(tmp_path_factory.mktemp("mcp-loop")) as server:
        yield World(server, server.create_key("mcp-loop"))


@pytest.mark.integration
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_recalled_fact_is_superseded_by_the_id_recall_showed(world: World, transport: str) -> None:
    subject = f"alice-{transport}"
    connect = TRANSPORTS[transport]
    async with connect(world.server, world.key) as session:
        await structured(
            session,
            "remember",
            subject_id=subject,
            facts=[{"content": "Alice works at Acme as a data engineer.", "key": "employer"}],
        )
    # A fresh session, as in a later conversation: only what recall shows is known.
    async with connect(world.server, world.key) as session:
        recalled = await session.call_tool(
            "recall", {"subject_id": subject, "query": "Where does Alice work?"}
        )
        text = text_of(recalled)
        (line,) = [line for line in text.splitlines() if "Acme" in line]
        shown = FACT_ID.search(line)
        assert shown is not None, text
        assert recalled.structured_content is not None
        assert recalled.structured_content["facts"][0]["fact_id"] == shown["id"]
        # The model copies the bracket whole: it is still the id.
        written = await structured(
            session,
            "remember",
            subject_id=subject,
            facts=[{"content": "Alice works at Globex.", "key": "employer", "supersedes": shown.group(0)}],
        )
        assert written["facts"][0]["conflict_set_id"] is None  # replaced, no conflict opened
        after = text_of(
            await session.call_tool("recall", {"subject_id": subject, "query": "Where does Alice work?"})
        )
        assert "Globex" in after and "Acme" not in after, after
        listed = await structured(session, "list_facts", subject_id=subject, status="any")
        status = {f["content"]: f["status"] for f in listed["facts"]}
        assert status == {
            "Alice works at Acme as a data engineer.": "superseded",
            "Alice works at Globex.": "active",
        }
        assert listed["next_cursor"] is None


@pytest.mark.integration
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ids_as_recall_prints_them_and_errors_that_say_why(world: World, transport: str) -> None:
    subject = f"bob-{transport}"
    async with TRANSPORTS[transport](world.server, world.key) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        for name, listed in tools.items():
            hints = listed.annotations
            assert hints is not None and hints.title, name
            assert hints.read_only_hint is (name in READ_ONLY), name
            assert hints.open_world_hint is False, name
            assert listed.output_schema is not None and listed.output_schema["type"] == "object", name
        assert tools["forget"].annotations.destructive_hint is True  # type: ignore[union-attr]
        assert tools["forget"].annotations.idempotent_hint is True  # type: ignore[union-attr]
        assert tools["remember"].annotations.destructive_hint is False  # type: ignore[union-attr]

        await structured(session, "remember", subject_id=subject, facts=[{"content": "Bob drinks tea."}])
        recalled = await session.call_tool("recall", {"subject_id": subject, "query": "What does Bob drink?"})
        last = text_of(recalled).splitlines()[-1]
        assert last.startswith("trace_id: ")
        # The exact line recall prints, and the id with spaces around, are the trace id.
        for given_id in (last, f"  {last.removeprefix('trace_id: ')} "):
            explained = await structured(session, "inspect", trace_id=given_id)
            assert explained["trace_id"] == last.removeprefix("trace_id: ")
            (item,) = explained["items"]
            assert item["content"] == "Bob drinks tea." and item["decision"] == "served"
            assert item["reason"] == "packed" and "scores" not in item
        scored = await structured(session, "inspect", trace_id=last, scores=True)
        assert scored["items"][0]["scores"]["rank"] == 1

        garbage = await error_of(session, "inspect", trace_id="garbage")
        assert garbage.startswith("validation_error: trace_id: a UUID is expected"), garbage
        bad_set = await error_of(session, "resolve_conflict", conflict_set_id="set-1", keep=[UUID_TEXT])
        assert bad_set.startswith("validation_error: conflict_set_id: a UUID is expected"), bad_set
        wrong_type = await error_of(session, "recall", subject_id=subject, query="x", budget_tokens="lots")
        assert wrong_type.startswith("validation_error: budget_tokens: "), wrong_type
        missing = await error_of(session, "remember", subject_id=subject, facts=[{"key": "employer"}])
        assert missing.startswith("validation_error: facts[0].content: "), missing


# --- in process: the tools' input schemas, fuzzed ----------------------------------------------


# Values a model gets wrong: other types, empty and oversized text, NUL, ids in the forms tools
# print them, and no value at all.
GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "garbage",
            "\x00",
            "a\x00b",
            "x" * 9000,
            f"trace_id: {UUID_TEXT}",
            f" {UUID_TEXT} ",
            f"[fact_id: {UUID_TEXT}]",
            "2026-11-20T10:00:00",
            "2026-13-45T99:00:00Z",
            "[]",
            "{}",
        ]
    ),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
MISSING = object()


def resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return cast(dict[str, Any], root["$defs"][ref.removeprefix("#/$defs/")])
    return schema


def argument_values(schema: dict[str, Any], root: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Garbage, or the schema's shape filled with garbage (objects with their own fields and some
    unknown ones, lists of such items)."""
    schema = resolve(schema, root)
    shapes: list[st.SearchStrategy[Any]] = [GARBAGE]
    for branch in schema.get("anyOf", []):
        shapes.append(argument_values(branch, root, depth))
    if depth < 3 and schema.get("type") == "array" and "items" in schema:
        shapes.append(st.lists(argument_values(schema["items"], root, depth + 1), max_size=3))
    if depth < 3 and schema.get("type") == "object" and "properties" in schema:
        fields = {
            name: st.one_of(st.just(MISSING), argument_values(sub, root, depth + 1))
            for name, sub in schema["properties"].items()
        }
        fields["unknown_field"] = st.one_of(st.just(MISSING), GARBAGE)
        shapes.append(
            st.fixed_dictionaries(fields).map(lambda d: {k: v for k, v in d.items() if v is not MISSING})
        )
    return st.one_of(shapes)


def tool_arguments(input_schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        name: st.one_of(st.just(MISSING), argument_values(sub, input_schema))
        for name, sub in input_schema["properties"].items()
    }
    return st.fixed_dictionaries(fields).map(lambda d: {k: v for k, v in d.items() if v is not MISSING})


CODE = re.compile(r"^(?P<code>[a-z_]+): (?P<reason>\S.*)", re.S)


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    """Each tool's input schema, as the server publishes it (the server built without an app)."""
    import anyio

    from service.api.mcp_server import build_server

    tools = anyio.run(build_server().list_tools)
    return {t.name: t.input_schema for t in tools}


@pytest.mark.slow
@hsettings(
    # Each example opens its own session (an anyio task group cannot span pytest's tasks).
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_no_malformed_argument_gives_an_error_without_a_reason(
    settings: Settings,
    conn: asyncpg.Connection,
    hash_embedder: Embedder,
    key: str,
    schemas: dict[str, dict[str, Any]],
    data: st.DataObject,
) -> None:
    name = data.draw(st.sampled_from(sorted(schemas)), label="tool")
    arguments = data.draw(tool_arguments(schemas[name]), label="arguments")
    async with tool_session(settings, conn, hash_embedder, key) as (_, session):
        outcome = await session.call_tool(name, arguments)
        tools = {t.name: t for t in (await session.list_tools()).tools}
    text = text_of(outcome)
    if not outcome.is_error:
        # A call that passed answers an object of the tool's output schema.
        assert isinstance(outcome.structured_content, dict)
        Draft202012Validator(tools[name].output_schema or {}).validate(outcome.structured_content)
        return
    said = CODE.match(text)
    assert said is not None, f"{name}({json.dumps(arguments)[:300]}) -> {text!r}"
    assert said["code"] != "internal", text
    if said["code"] == "validation_error":
        # It names the argument at fault: one of the tool's own, as the model wrote it.
        named = {m.split(".")[0].split("[")[0] for m in re.findall(r"([\w.\[\]]+): ", said["reason"])}
        assert named & set(schemas[name]["properties"]), f"{name}({json.dumps(arguments)[:300]}) -> {text!r}"
