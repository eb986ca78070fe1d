"""A scope's GIN postings hold only its own texts (migration 0023): each lexeme behind the scope's
key, with its positions and weights, and the key alone. A query matches a text through the keys
exactly when it matches the text itself, and never through another scope's keys."""

from __future__ import annotations

import asyncpg
import pytest

from service.constants import TEXT_MATCHES_PER_WORD
from tests.helpers.sql import load_test_queries

PROJECT = "keyed"

# Texts and tsquery inputs that exercise what a rename of lexemes could break: phrases (positions),
# negation alone (the key), prefixes, quotes and backslashes inside lexemes.
TEXTS = [
    "The big cat sat on the mat",
    "A cat, big and grey",
    "O'Brien wrote it's done",
    r"path a\b and c\\d",
    "",
]
QUERIES = [
    "'big' <-> 'cat'",
    "'cat' <-> 'big'",
    "'big' <2> 'sat'",
    "!'dog'",
    "!'cat'",
    "'ca':*",
    "'it''s'",
    "'o''brien' | 'grey'",
    r"'a\\b'",
    "'big' & !'mat'",
    "'nothing'",
]


@pytest.mark.parametrize("query", QUERIES)
async def test_a_query_matches_through_the_keys_exactly_when_it_matches_the_text(
    conn: asyncpg.Connection, query: str
) -> None:
    t = load_test_queries()
    for content in TEXTS:
        row = await t.test_keyed_match(
            conn, project_id=PROJECT, subject_id="a", other_subject_id="b", content=content, query=query
        )
        assert row is not None
        assert row["keyed"] == row["plain"], (content, query, dict(row))
        assert row["other_scope"] is False, (content, query)


async def test_the_keyed_vector_keeps_positions_weights_and_the_key(conn: asyncpg.Connection) -> None:
    row = await load_test_queries().test_keyed_vector(
        conn, project_id=PROJECT, subject_id="a", vector="'cat':2,7A 'it''s':1 'mat'"
    )
    assert row is not None
    key = row["scope_key"]
    assert len(key) == 17 and key.endswith(".")
    assert row["keyed"] == f"'{key}' '{key}cat':2,7A '{key}it''s':1 '{key}mat'"


async def test_a_scope_reads_its_own_postings_only(conn: asyncpg.Connection) -> None:
    """Two scopes of one project name the same word: each scope's lookup returns its facts, all of
    them, through the keyed GIN index."""
    t = load_test_queries()
    for subject in ("a", "b"):
        await t.test_seed_random_facts(
            conn, project_id=PROJECT, subject_id=subject, n=40, content_prefix=f"zebra {subject}"
        )
    rows = {
        subject: [
            r
            async for r in t.test_fact_postings(
                conn, project_id=PROJECT, subject_id=subject, word="zebra", max_rows=TEXT_MATCHES_PER_WORD
            )
        ]
        for subject in ("a", "b")
    }
    for subject, found in rows.items():
        assert len(found) == 40
        assert {r["subject_id"] for r in found} == {subject}
