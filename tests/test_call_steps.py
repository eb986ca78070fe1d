"""The terms of a context call (its plan mode; the commit stays durable) are one step, in one round
trip, which changes only what its name says. Every setting is set with `is_local` (queries/
context.sql), so for the call's transaction only; a test's connection is inside a transaction of
its own, which the step's savepoint cannot show the end of."""

from __future__ import annotations

import asyncpg

from service.context import assembler
from tests.helpers.sql import load_test_queries


async def settings_now(conn: asyncpg.Connection) -> dict[str, str]:
    row = await load_test_queries().test_call_settings(conn)
    assert row is not None
    return dict(row)


async def test_the_call_terms_are_one_statement_that_sets_what_they_name(conn: asyncpg.Connection) -> None:
    before = await settings_now(conn)
    assert before["synchronous_commit"] == "on"
    statements: list[str] = []

    def log(record: asyncpg.connection.LoggedQuery) -> None:
        statements.append(record.query)

    async with conn.transaction():
        conn.add_query_logger(log)
        try:
            await assembler.open_context_call(conn)
        finally:
            conn.remove_query_logger(log)
        opened = await settings_now(conn)
    assert opened == {
        **before,
        "ef_search": str(assembler.EF_SEARCH),
        "iterative_scan": "relaxed_order",
        "plan_cache_mode": "force_generic_plan",
    }
    # One round trip, and synchronous_commit stays on: the trace is durable before the answer.
    assert len(statements) == 1, statements
