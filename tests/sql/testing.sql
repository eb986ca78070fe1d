-- Test-only statements (tests/test_context_*.py). The service never calls them: every name
-- starts with test_, and each one runs inside a test's rolled-back transaction.

-- name: test_prepare_bulk_load()^
-- For the current transaction only: no statement timeout, and room to build an HNSW index in
-- memory, so a test can seed tens of thousands of facts.
SELECT set_config('statement_timeout', '0', true) AS statement_timeout,
       set_config('maintenance_work_mem', '256MB', true) AS maintenance_work_mem,
       set_config('max_parallel_maintenance_workers', '4', true) AS max_parallel_maintenance_workers;

-- name: test_drop_fact_vector_index()!
-- Remembers the definitions of the facts HNSW indexes (one per scope bucket, migration 0008) in
-- a transaction-local setting and drops them, so a bulk seed skips one-by-one graph insertions;
-- test_restore_fact_vector_index builds the very same indexes back in one pass each. Only ever
-- inside a transaction that is rolled back.
DO $$
DECLARE
    idx record;
    defs text[] := '{}';
BEGIN
    FOR idx IN
        SELECT i.indexrelid::regclass AS name, pg_get_indexdef(i.indexrelid) AS def
        FROM pg_index AS i
        JOIN pg_class AS c ON c.oid = i.indexrelid
        JOIN pg_am AS am ON am.oid = c.relam
        WHERE i.indrelid = 'facts'::regclass AND am.amname = 'hnsw'
    LOOP
        defs := defs || idx.def;
        EXECUTE format('DROP INDEX %s', idx.name);
    END LOOP;
    PERFORM set_config('haki_test.facts_hnsw_defs', array_to_string(defs, E'\n'), true);
END
$$;

-- name: test_restore_fact_vector_index()!
-- Rebuilds the facts HNSW indexes dropped by test_drop_fact_vector_index, from their saved definitions.
DO $$
DECLARE
    def text;
BEGIN
    FOREACH def IN ARRAY string_to_array(current_setting('haki_test.facts_hnsw_defs'), E'\n')
    LOOP
        EXECUTE def;
    END LOOP;
END
$$;

-- name: test_fact_vector_index(project_id, subject_id)$
-- The partial HNSW index of a scope's bucket (migration 0008), by name.
SELECT format('facts_embedding_hnsw_%s', lpad(public.haki_scope_bucket(:project_id, :subject_id)::text, 2, '0'));

-- name: test_event_vector_index(project_id, subject_id)$
-- The partial HNSW index of a scope's bucket over events (migration 0008), by name.
SELECT format('events_embedding_hnsw_%s', lpad(public.haki_scope_bucket(:project_id, :subject_id)::text, 2, '0'));

-- name: test_seed_random_facts(project_id, subject_id, n, content_prefix)!
-- Bulk-seeds n active facts of one scope, server-side, with random unit embeddings (Gaussian
-- coordinates, L2-normalised, so uniform on the sphere) and the content "<content_prefix> <i>".
INSERT INTO facts (project_id, fact_id, subject_id, content, embedding)
SELECT :project_id, uuidv7(), :subject_id, :content_prefix || ' ' || g.i, v.embedding
FROM generate_series(1, :n::integer) AS g(i)
CROSS JOIN LATERAL (
    SELECT l2_normalize(array_agg(random_normal())::vector(384)) AS embedding
    FROM generate_series(1, 384)
    WHERE g.i IS NOT NULL  -- correlated, so every row draws its own vector
) AS v;

-- name: test_analyze_facts()!
-- Refreshes the planner statistics of facts after a bulk seed.
ANALYZE facts;

-- name: test_vector_walks(project_id, subject_id, query_embedding, top_k, exact_scan_min)^
-- What the candidate statements' walks (migration 0017) return for a scope, now: how many facts
-- and how many events.
SELECT (SELECT count(*)
        FROM public.haki_fact_walk(:project_id, :subject_id, :query_embedding::vector,
                                   :top_k::integer, :exact_scan_min::integer, NULL,
                                   public.haki_open_conflict_facts(:project_id, :subject_id, NULL))) AS facts,
       (SELECT count(*)
        FROM public.haki_event_walk(:project_id, :subject_id, :query_embedding::vector,
                                    :top_k::integer, :exact_scan_min::integer, NULL)) AS events;

-- name: test_seed_random_events(project_id, subject_id, n, content_prefix)!
-- Bulk-seeds n events of one scope, as test_seed_random_facts seeds facts, one minute apart.
INSERT INTO events (project_id, event_id, subject_id, content, occurred_at, embedding)
SELECT :project_id, uuidv7(), :subject_id, :content_prefix || ' ' || g.i,
       now() - make_interval(mins => g.i), v.embedding
FROM generate_series(1, :n::integer) AS g(i)
CROSS JOIN LATERAL (
    SELECT l2_normalize(array_agg(random_normal())::vector(384)) AS embedding
    FROM generate_series(1, 384)
    WHERE g.i IS NOT NULL  -- correlated, so every row draws its own vector
) AS v;

-- name: test_pretend_every_subject_tiny#
-- Statistics that make a generic plan guess one row per subject (n_distinct -1: every row its own
-- subject), so a plan picked by estimates sorts any scope instead of walking a graph.
ALTER TABLE facts ALTER COLUMN subject_id SET (n_distinct = -1);
ALTER TABLE events ALTER COLUMN subject_id SET (n_distinct = -1);
ANALYZE facts, events;

-- name: test_pretend_one_subject#
-- Statistics that make a generic plan guess that a subject is the whole table (n_distinct 1), so
-- a plan picked by estimates reads the whole table for any scope.
ALTER TABLE facts ALTER COLUMN subject_id SET (n_distinct = 1);
ALTER TABLE events ALTER COLUMN subject_id SET (n_distinct = 1);
ANALYZE facts, events;

-- name: test_count_facts()$
-- Number of rows in the facts table, all projects and statuses.
SELECT count(*) FROM facts;

-- name: test_vector_scan_settings()^
-- The HNSW scan settings in force for the current transaction.
SELECT current_setting('hnsw.ef_search', true)::integer AS ef_search,
       current_setting('hnsw.iterative_scan', true) AS iterative_scan;

-- name: test_index_scans(index_name)$
-- Index scans started on one index by the current transaction so far
-- (pg_stat_get_xact_numscans): tells which plan ran without parsing EXPLAIN.
SELECT pg_stat_get_xact_numscans(:index_name::regclass);

-- name: test_track_pl_functions()!
-- For the current transaction: count the calls of PL/pgSQL functions (track_functions = 'pl'),
-- so that test_function_calls can tell which of them ran.
SET LOCAL track_functions = 'pl';

-- name: test_function_calls(function_name)$
-- Calls of one PL/pgSQL function by the current transaction so far (test_track_pl_functions).
SELECT coalesce((SELECT f.calls
                 FROM pg_stat_xact_user_functions AS f
                 WHERE f.funcid = :function_name::regproc), 0) AS calls;

-- name: test_subject_per_bucket(project_id)
-- One subject id of each scope bucket of a project (migration 0008), the first of
-- 'bucket-probe-1', 'bucket-probe-2', ... that falls in it, and how many buckets there are.
SELECT DISTINCT ON (b.bucket) b.bucket, b.subject_id, public.haki_scope_buckets() AS buckets
FROM (
    SELECT public.haki_scope_bucket(:project_id, 'bucket-probe-' || g.i) AS bucket,
           'bucket-probe-' || g.i AS subject_id, g.i
    FROM generate_series(1, 10000) AS g(i)
) AS b
ORDER BY b.bucket, b.i;

-- name: test_graph_walks(project_id, subject_id, query_embedding)^
-- What the graph walks of migration 0022 return for a scope, called directly: how many facts and
-- how many events (a bucket without a branch raises).
SELECT (SELECT count(*)
        FROM public.haki_fact_graph_walk(:project_id, :subject_id, :query_embedding::vector, 8,
                                         NULL, '{}'::uuid[])) AS facts,
       (SELECT count(*)
        FROM public.haki_event_graph_walk(:project_id, :subject_id, :query_embedding::vector, 8,
                                          NULL)) AS events;

-- name: test_rows_read(table_name)$
-- Rows of one table the current transaction has read so far: those its sequential scans read
-- (pg_stat_get_xact_tuples_returned of the table), its bitmap scans fetched (tuples_fetched of
-- the table) and its index scans fetched (tuples_fetched of each of its indexes). What a
-- statement costs, whatever plan it ran.
SELECT pg_stat_get_xact_tuples_returned(:table_name::regclass)
       + pg_stat_get_xact_tuples_fetched(:table_name::regclass)
       + (SELECT coalesce(sum(pg_stat_get_xact_tuples_fetched(i.indexrelid)), 0)::bigint
          FROM pg_index AS i
          WHERE i.indrelid = :table_name::regclass);

-- name: test_shift_project_times(project_id, seconds)!
-- Moves every instant of one project's memory and call log `seconds` into the past, as if it had
-- all happened then: a test runs in one transaction, whose now() never moves, and time travel
-- (docs/time-travel.md) needs the instants of the writes and calls it compares to differ.
WITH shifted_facts AS (
    UPDATE facts
    SET valid_from = valid_from - make_interval(secs => :seconds),
        valid_to = valid_to - make_interval(secs => :seconds),
        recorded_from = recorded_from - make_interval(secs => :seconds),
        recorded_to = recorded_to - make_interval(secs => :seconds),
        believed_valid_to = believed_valid_to - make_interval(secs => :seconds)
    WHERE project_id = :project_id
    RETURNING fact_id
),
shifted_events AS (
    UPDATE events
    SET occurred_at = occurred_at - make_interval(secs => :seconds),
        recorded_at = recorded_at - make_interval(secs => :seconds)
    WHERE project_id = :project_id
    RETURNING event_id
),
shifted_conflicts AS (
    UPDATE conflict_sets
    SET created_at = created_at - make_interval(secs => :seconds),
        resolved_at = resolved_at - make_interval(secs => :seconds)
    WHERE project_id = :project_id
    RETURNING conflict_set_id
)
UPDATE context_calls
SET created_at = created_at - make_interval(secs => :seconds),
    as_of = as_of - make_interval(secs => :seconds)
WHERE project_id = :project_id;

-- name: test_seed_pre_time_travel_history(project_id)!
-- A history written the way the statements before migration 0012 wrote it (statuses without
-- recorded_to), for the backfill test of tests/test_migrations.py on a database migrated up to
-- 0011: Paris superseded by Berlin (at 2026-01-02), Acme lost a conflict resolved at
-- 2026-01-03 to Globex, tea retracted (when is not recorded), a cat still active.
WITH written AS (
    INSERT INTO facts (project_id, fact_id, subject_id, content, key, status, valid_to,
                       recorded_from, supersedes, embedding)
    SELECT :project_id, t.fact_id::uuid, 'alice', t.content, t.key, t.status,
           t.valid_to::timestamptz, t.recorded_from::timestamptz, t.supersedes::uuid,
           array_fill(0.05, ARRAY[384])::vector
    FROM (VALUES
        ('00000000-0000-7000-8000-00000000000a', 'lives in paris', 'city', 'superseded',
         '2026-01-02', '2026-01-01', NULL),
        ('00000000-0000-7000-8000-00000000000b', 'lives in berlin', 'city', 'active',
         NULL, '2026-01-02', '00000000-0000-7000-8000-00000000000a'),
        ('00000000-0000-7000-8000-00000000000c', 'works at acme', 'job', 'superseded',
         '2026-01-03', '2026-01-01', NULL),
        ('00000000-0000-7000-8000-00000000000d', 'works at globex', 'job', 'active',
         NULL, '2026-01-01', NULL),
        ('00000000-0000-7000-8000-00000000000e', 'likes tea', NULL, 'retracted',
         NULL, '2026-01-01', NULL),
        ('00000000-0000-7000-8000-00000000000f', 'has a cat', NULL, 'active',
         NULL, '2026-01-01', NULL)
    ) AS t(fact_id, content, key, status, valid_to, recorded_from, supersedes)
    RETURNING fact_id
),
opened AS (
    INSERT INTO conflict_sets (project_id, conflict_set_id, subject_id, key, status, created_at,
                               resolved_at)
    VALUES (:project_id, '00000000-0000-7000-8000-0000000000c5', 'alice', 'job', 'resolved',
            '2026-01-01', '2026-01-03')
    RETURNING conflict_set_id
)
INSERT INTO conflict_members (project_id, conflict_set_id, fact_id)
SELECT :project_id, o.conflict_set_id, w.fact_id
FROM opened AS o
CROSS JOIN written AS w
WHERE w.fact_id IN ('00000000-0000-7000-8000-00000000000c', '00000000-0000-7000-8000-00000000000d');

-- name: test_seed_sets_left_open(project_id)!
-- Conflict sets as a release before resolve_left_conflict_sets left them, for migration 0046's
-- test in tests/test_migrations.py: `sport` opened by two claims of which one was retracted
-- since (left open with one), `food` still disputed by two active claims.
WITH written AS (
    INSERT INTO facts (project_id, fact_id, subject_id, content, key, status, recorded_from,
                       recorded_to, embedding)
    SELECT :project_id, t.fact_id::uuid, 'u1', t.content, t.key, t.status, '2026-01-01',
           t.recorded_to::timestamptz, array_fill(0.05, ARRAY[384])::vector
    FROM (VALUES
        ('00000000-0000-7000-8000-0000000000a1', 'plays tennis', 'sport', 'active', NULL),
        ('00000000-0000-7000-8000-0000000000a2', 'plays golf', 'sport', 'retracted', '2026-01-02'),
        ('00000000-0000-7000-8000-0000000000b1', 'eats fish', 'food', 'active', NULL),
        ('00000000-0000-7000-8000-0000000000b2', 'eats no fish', 'food', 'active', NULL)
    ) AS t(fact_id, content, key, status, recorded_to)
    RETURNING fact_id, key
),
opened AS (
    INSERT INTO conflict_sets (project_id, conflict_set_id, subject_id, key, status, created_at)
    VALUES (:project_id, '00000000-0000-7000-8000-0000000000c1', 'u1', 'sport', 'open', '2026-01-01'),
           (:project_id, '00000000-0000-7000-8000-0000000000c2', 'u1', 'food', 'open', '2026-01-01')
    RETURNING conflict_set_id, key
)
INSERT INTO conflict_members (project_id, conflict_set_id, fact_id)
SELECT :project_id, o.conflict_set_id, w.fact_id
FROM opened AS o
JOIN written AS w ON w.key = o.key;

-- name: test_set_fact_status(project_id, fact_id, status)!
-- Changes a fact's status the way the statements before migration 0012 did (without recorded_to):
-- the CHECK of 0012 must refuse it.
UPDATE facts
SET status = :status
WHERE project_id = :project_id
  AND fact_id = :fact_id;

-- name: test_call_settings()^
-- The settings a context call's steps change, as this transaction sees them (NULL: pgvector's
-- settings before the extension is loaded in the session).
SELECT current_setting('hnsw.ef_search', true) AS ef_search,
       current_setting('hnsw.iterative_scan', true) AS iterative_scan,
       current_setting('plan_cache_mode') AS plan_cache_mode,
       current_setting('synchronous_commit') AS synchronous_commit;

-- name: test_table_analyze_count(table_name)^
-- How many times a table was analyzed by hand (the statistics keeper's ANALYZE, not autovacuum's).
SELECT s.analyze_count AS analyze_count
FROM pg_catalog.pg_stat_user_tables AS s
WHERE s.relname = :table_name;

-- name: test_keyed_match(project_id, subject_id, other_subject_id, content, query)^
-- A text's match of a query (tsquery input) three ways: plain, through its scope's keys
-- (migration 0023), and through another scope's keys.
SELECT to_tsvector('simple', :content) @@ :query::tsquery AS plain,
       public.haki_scope_keyed_vector(:project_id, :subject_id, to_tsvector('simple', :content))
           @@ public.haki_scope_keyed_query(:project_id, :subject_id, :query::tsquery) AS keyed,
       public.haki_scope_keyed_vector(:project_id, :subject_id, to_tsvector('simple', :content))
           @@ public.haki_scope_keyed_query(:project_id, :other_subject_id, :query::tsquery) AS other_scope;

-- name: test_keyed_vector(project_id, subject_id, vector)^
-- What a scoped GIN index holds of a text (migration 0023), with the scope's key.
SELECT public.haki_scope_keyed_vector(:project_id, :subject_id, :vector::tsvector)::text AS keyed,
       public.haki_scope_key(:project_id, :subject_id) AS scope_key;

-- name: test_fact_postings(project_id, subject_id, word, max_rows)
-- A word's servable facts in one scope, as the context statements read them (haki_fact_postings).
SELECT f.subject_id AS subject_id, f.content AS content
FROM public.haki_fact_postings(:project_id, :subject_id, 'simple'::regconfig,
                               plainto_tsquery('simple', :word), NULL::timestamptz) AS f
LIMIT :max_rows;

-- name: test_scope_sample(project_id, subject_id, sample_docs)
-- The texts of a scope's statistics sample now (haki_scope_sample, the simple configuration).
SELECT s.sv::text AS words
FROM public.haki_scope_sample(:project_id, :subject_id, 'simple'::regconfig, :sample_docs, NULL) AS s;

-- name: test_fact_stale_at(valid_from, stale_after_seconds, at)$
-- Whether a volatile fact starting at valid_from is stale at an instant (haki_fact_stale).
SELECT public.haki_fact_stale('volatile', :valid_from::timestamptz, :valid_from::timestamptz,
                              make_interval(secs => :stale_after_seconds::float8), :at::timestamptz);

-- name: test_seed_stale_facts(project_id, subject_id, n)!
-- Bulk-seeds n volatile facts of one scope that went stale years ago, one shared vector: each is
-- traced blocked `volatility_expired` by every context call of the scope. Seed after
-- test_drop_fact_vector_index: one by one, the HNSW inserts take minutes.
INSERT INTO facts (project_id, fact_id, subject_id, content, volatility, stale_after, valid_from,
                   embedding)
SELECT :project_id, uuidv7(), :subject_id, 'stale state ' || g.i, 'volatile', interval '1 day',
       timestamptz '2020-01-01', array_fill(0.05::real, ARRAY[384])::vector(384)
FROM generate_series(1, :n::integer) AS g(i);

-- name: test_set_delivery_attempts(project_id, event_id, attempts)!
-- Gives one event's deliveries as many attempts as a long-lived failing receiver would have.
UPDATE webhook_deliveries AS d
SET attempts = :attempts::integer
WHERE d.project_id = :project_id
  AND d.event_id = :event_id;

-- name: test_prepared_plans(statement)^
-- How the connection's prepared statement of this text was planned: generic and custom plans.
SELECT p.generic_plans AS generic_plans, p.custom_plans AS custom_plans
FROM pg_prepared_statements AS p
WHERE p.statement = :statement;

-- name: test_migration_session_timeouts()^
-- The session's statement and lock timeouts, as a migration runner leaves them.
SELECT current_setting('statement_timeout') AS statement_timeout,
       current_setting('lock_timeout') AS lock_timeout;

-- name: test_lock_waiters()
-- The sessions of this database waiting on a lock now (pg_stat_activity), to force an interleaving.
SELECT a.pid AS pid
FROM pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.wait_event_type = 'Lock';

-- name: test_migration_lock_holders()$
-- How many sessions hold the migration advisory lock (queries/migrations.sql) now.
SELECT count(*) AS holders
FROM pg_locks AS l
WHERE l.locktype = 'advisory'
  AND ((l.classid::bigint << 32) | l.objid::bigint) = 7274626173
  AND l.objsubid = 1
  AND l.granted;

-- name: test_clear_stats_snapshot()$
-- Drops the session's snapshot of pg_stat_activity: a transaction otherwise keeps its first view.
SELECT 1 AS cleared
FROM (SELECT pg_stat_clear_snapshot()) AS s;

-- name: test_count_event_context_claims(project_id)$
-- How many claims on events' vectors in context (migration 0047) a project holds.
SELECT count(*) AS claims
FROM event_context_claims AS c
WHERE c.project_id = :project_id;
