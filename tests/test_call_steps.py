"""The plan mode and the durability choice of a context call are steps of their own, each
changing only what its name says, and only for the call's transaction."""

from __future__ import annotations

import asyncpg

from service.context import assembler
from tests.helpers.sql import load_test_queries


async def settings_now(conn: asyncpg.Connection) -> dict[str, str]:
    row = await load_test_queries().test_call_settings(conn)
    assert row is not None
    return dict(row)


async def test_each_step_changes_what_it_names_for_the_transaction_only(conn: asyncpg.Connection) -> None:
    before = await settings_now(conn)
    async with conn.transaction():
        await assembler.plan_context_call(conn)
        planned = await settings_now(conn)
        assert planned == {
            **before,
            "ef_search": str(assembler.EF_SEARCH),
            "iterative_scan": "relaxed_order",
            "plan_cache_mode": "force_generic_plan",
        }
        # The durability choice is its own step: the plan mode never changed it.
        assert planned["synchronous_commit"] == before["synchronous_commit"] == "on"
        await assembler.commit_without_flush(conn)
        assert await settings_now(conn) == {**planned, "synchronous_commit": "off"}
