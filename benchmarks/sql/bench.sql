-- Benchmark-only statements (benchmarks/, loaded by benchmarks/sql.py): bulk-load helpers and the
-- score-every-fact baseline. Never shipped, never called by the service; throw-away databases only.

-- name: bench_set_maintenance(maintenance_work_mem, parallel_workers)$
-- Session-wide, for a bulk load: room for an in-memory HNSW build, parallel index builds, and
-- no statement timeout (the service's 5 s would cancel an index build).
SELECT set_config('maintenance_work_mem', :maintenance_work_mem::text, false) AS maintenance_work_mem,
       set_config('max_parallel_maintenance_workers', :parallel_workers::integer::text, false)
           AS max_parallel_maintenance_workers,
       set_config('statement_timeout', '0', false) AS statement_timeout;

-- name: bench_stash_indexes#
-- Saves then drops the secondary indexes of facts and events (the definitions the migrations
-- produced, read from the catalog), so a bulk COPY does not maintain HNSW and GIN row by row;
-- pg_temp.bench_restore_index(name) rebuilds one. Session-local: one connection does both.
CREATE TEMP TABLE IF NOT EXISTS bench_index_defs (
    index_name   text PRIMARY KEY,
    table_name   text NOT NULL,
    method       text NOT NULL,
    definition   text NOT NULL
);
CREATE OR REPLACE FUNCTION pg_temp.bench_restore_index(p_index_name text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_definition text;
BEGIN
    DELETE FROM bench_index_defs WHERE index_name = p_index_name RETURNING definition INTO v_definition;
    IF v_definition IS NULL THEN
        RAISE EXCEPTION 'no stashed index %', p_index_name;
    END IF;
    EXECUTE v_definition;
END
$fn$;
DO $do$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT ic.relname AS index_name, tc.relname AS table_name, am.amname AS method,
               pg_get_indexdef(i.indexrelid) AS definition
        FROM pg_index AS i
        JOIN pg_class AS ic ON ic.oid = i.indexrelid
        JOIN pg_class AS tc ON tc.oid = i.indrelid
        JOIN pg_am AS am ON am.oid = ic.relam
        WHERE tc.relname IN ('facts', 'events')
          AND tc.relnamespace = 'public'::regnamespace
          AND NOT i.indisprimary
          AND NOT EXISTS (SELECT 1 FROM pg_constraint AS k WHERE k.conindid = i.indexrelid)
    LOOP
        INSERT INTO bench_index_defs (index_name, table_name, method, definition)
        VALUES (r.index_name, r.table_name, r.method, r.definition);
        EXECUTE format('DROP INDEX public.%I', r.index_name);
    END LOOP;
END
$do$;

-- name: bench_stashed_indexes()
-- The indexes bench_stash_indexes dropped, B-trees first and HNSW last (longest build).
SELECT index_name, table_name, method
FROM bench_index_defs
ORDER BY (method = 'hnsw'), (method = 'gin'), index_name;

-- name: bench_restore_index(index_name)$
-- Rebuilds one stashed index with its original definition.
SELECT pg_temp.bench_restore_index(:index_name) IS NULL AS restored;

-- name: bench_vacuum_analyze#
-- Steady state after a bulk load: visibility map and hint bits set, planner statistics fresh.
VACUUM (ANALYZE) facts, events, conflict_sets, conflict_members;

-- name: bench_relation_sizes()
-- Heap (with TOAST) and index sizes of the memory tables, in bytes.
SELECT c.relname AS relation, c.relkind AS kind, pg_total_relation_size(c.oid) AS total_bytes,
       pg_relation_size(c.oid) AS main_bytes, coalesce(am.amname, 'heap') AS method
FROM pg_class AS c
LEFT JOIN pg_am AS am ON am.oid = c.relam AND c.relkind = 'i'
LEFT JOIN pg_index AS i ON i.indexrelid = c.oid
LEFT JOIN pg_class AS t ON t.oid = i.indrelid
WHERE c.relnamespace = 'public'::regnamespace
  AND (c.relname IN ('facts', 'events') OR t.relname IN ('facts', 'events'))
ORDER BY c.relname;

-- name: bench_score_all_facts(project_id, subject_id, query_embedding, query_text, candidate_limit, w_similarity, w_text_rank, w_recency, tau_seconds)
-- The baseline two-phase retrieval replaced: the same hybrid score as fact_candidates, computed
-- over every servable fact of the scope (same hard filters), ORDER BY score, LIMIT 256. The
-- rules are the functions fact_candidates calls (migrations/rules.sql), at the current instant,
-- so the baseline cannot drift from them (it had lost haki_recency's underflow guard).
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('simple', :query_text) AS tsq
),
parts AS (
    SELECT f.fact_id, f.content, f.valid_from, f.valid_to, f.recorded_from, f.source_event_id,
           public.haki_tokens(f.content) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           public.haki_text_rank(f.search_vector, q.tsq) AS text_rank,
           public.haki_fact_recency(f.valid_from, f.recorded_from, :tau_seconds, NULL::timestamptz) AS recency
    FROM facts AS f
    CROSS JOIN q
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from,
                                    f.recorded_from, f.stale_after, f.recorded_to,
                                    f.believed_valid_to, NULL::timestamptz)
      AND NOT EXISTS (SELECT 1 FROM public.haki_open_conflict_members(:project_id) AS o
                      WHERE o.fact_id = f.fact_id)
)
SELECT p.fact_id, p.content, p.valid_from, p.valid_to, p.recorded_from, p.source_event_id, p.tokens,
       p.cosine_distance, 1 - p.cosine_distance AS similarity, p.text_rank, p.recency,
       public.haki_hybrid_score(p.cosine_distance, p.text_rank, p.recency,
                                :w_similarity, :w_text_rank, :w_recency) AS score
FROM parts AS p
ORDER BY score DESC, p.fact_id
LIMIT :candidate_limit;

-- name: bench_exact_neighbours(project_id, subject_id, query_embedding, top_k)
-- Ground truth for recall: the exact top-K servable facts of the scope by cosine distance (the
-- hard filters of fact_candidates), computed without the vector index (`+ 0` hides the operator).
SELECT f.fact_id, f.embedding <=> :query_embedding::vector AS cosine_distance
FROM facts AS f
WHERE f.project_id = :project_id
  AND f.subject_id = :subject_id
  AND public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from,
                                f.recorded_from, f.stale_after, f.recorded_to,
                                f.believed_valid_to, NULL::timestamptz)
  AND NOT EXISTS (SELECT 1 FROM public.haki_open_conflict_members(:project_id) AS o
                      WHERE o.fact_id = f.fact_id)
ORDER BY (f.embedding <=> :query_embedding::vector) + 0, f.fact_id
LIMIT :top_k;

-- name: bench_tune_shared_buffers#
-- For the next start of the server (ALTER SYSTEM writes postgresql.auto.conf): 2GB of shared
-- buffers instead of the embedded server's 128MB, so a 1M-fact HNSW index stays in
-- PostgreSQL's own cache. Only for benchmarks that compare a tuned server.
ALTER SYSTEM SET shared_buffers = '2GB';

-- name: bench_define_explain#
-- Session-local pg_temp.bench_explain(statement, args): PREPAREs one named query's SQL and
-- returns EXPLAIN (ANALYZE, BUFFERS) of its execution with the given arguments (as text
-- literals, coerced to the parameter types the statement implies), for docs/performance.md.
CREATE OR REPLACE FUNCTION pg_temp.bench_explain(p_statement text, p_args text[]) RETURNS SETOF text
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    v_args text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = 'bench_explained') THEN
        DEALLOCATE bench_explained;
    END IF;
    EXECUTE 'PREPARE bench_explained AS ' || p_statement;
    SELECT string_agg(quote_nullable(u.a), ', ' ORDER BY u.i) INTO v_args
    FROM unnest(p_args) WITH ORDINALITY AS u(a, i);
    FOR r IN EXECUTE format('EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_explained(%s)', v_args) LOOP
        RETURN NEXT r."QUERY PLAN";
    END LOOP;
    DEALLOCATE bench_explained;
END
$fn$;

-- name: bench_explain(statement, args)
-- The plan lines of pg_temp.bench_explain (bench_define_explain first, same session).
SELECT line FROM pg_temp.bench_explain(:statement, :args::text[]) AS line;

-- name: bench_function_source(function_name)^
-- A function's body, its parameters (names and types, in order) and the settings of its SET
-- clauses: benchmarks/explain.py EXPLAINs the walks of migration 0017, and the branches of the
-- graph walks of migration 0022, as the statements they are, under their own settings (EXPLAIN
-- of the calling statement shows one Function Scan).
SELECT p.prosrc AS body,
       p.proargnames[1 : p.pronargs] AS arg_names,
       ARRAY(SELECT format_type(t.oid, NULL) FROM unnest(p.proargtypes) WITH ORDINALITY AS a(oid, i)
             JOIN pg_type AS t ON t.oid = a.oid ORDER BY a.i) AS arg_types,
       coalesce(p.proconfig, '{}'::text[]) AS settings
FROM pg_proc AS p
WHERE p.oid = :function_name::regproc;

-- name: bench_scope_bucket(project_id, subject_id)$
-- The bucket of a scope (migration 0008): which branch of a graph walk runs for it (migration
-- 0022).
SELECT public.haki_scope_bucket(:project_id, :subject_id) AS bucket;

-- name: bench_open_conflict_facts(project_id, subject_id)$
-- The facts of a scope's open ConflictSets now, as the candidate statements hand them to
-- haki_fact_walk (migration 0017).
SELECT public.haki_open_conflict_facts(:project_id, :subject_id, NULL) AS fact_ids;

-- name: bench_apply_settings(settings)$
-- For the current transaction: settings given as name=value (a function's proconfig).
SELECT count(set_config(split_part(s.setting, '=', 1), substr(s.setting, strpos(s.setting, '=') + 1), true))
       AS applied
FROM unnest(:settings::text[]) AS s(setting);

-- name: bench_shared_buffers()$
-- The server's shared_buffers, for the report.
SELECT current_setting('shared_buffers') AS shared_buffers;

-- name: bench_create_fact_counters#
-- The alternative to counting from the traces (benchmarks/trace_usage.py): one counter row a
-- fact, maintained by the trace write (bench_insert_context_trace_with_counters).
CREATE TABLE IF NOT EXISTS bench_fact_counters (
    project_id      text         NOT NULL,
    fact_id         uuid         NOT NULL,
    served_count    bigint       NOT NULL,
    excluded_count  bigint       NOT NULL,
    last_served_at  timestamptz,
    PRIMARY KEY (project_id, fact_id)
);

-- name: bench_insert_context_trace_with_counters(project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status, warnings, empty_reason, facts_served, episodes_served, include_episodes, recall_max_distance, as_of, replay_of, decisions)!
-- insert_context_trace plus the counters' upsert in the same round trip, facts in id order (so
-- two concurrent calls lock their common rows in one order).
WITH call AS (
    INSERT INTO context_calls (
        project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status,
        warnings, empty_reason, facts_served, episodes_served, include_episodes,
        recall_max_distance, as_of, replay_of
    )
    VALUES (
        :project_id, :trace_id, :subject_id, :query, :profile, :budget_tokens, :used_tokens, :status,
        :warnings::text[], :empty_reason, :facts_served, :episodes_served, :include_episodes,
        :recall_max_distance, :as_of::timestamptz, :replay_of::uuid
    )
    RETURNING project_id, trace_id, as_of IS NULL AND replay_of IS NULL AS counted
),
d AS MATERIALIZED (
    SELECT t.item_type, t.item_id, t.decision, t.reason_code, t.rank, t.score, t.similarity,
           t.text_rank, t.recency, t.cosine_distance, t.tokens, t.ord
    FROM ROWS FROM (
        json_to_recordset(:decisions::json) AS (
            item_type text, item_id uuid, decision text, reason_code text, rank integer,
            score float8, similarity float8, text_rank float8, recency float8,
            cosine_distance float8, tokens integer
        )
    ) WITH ORDINALITY AS t(item_type, item_id, decision, reason_code, rank, score, similarity,
                           text_rank, recency, cosine_distance, tokens, ord)
),
traced AS (
    INSERT INTO context_traces (
        project_id, trace_id, ord, item_type, item_id, decision, reason_code, rank, score,
        similarity, text_rank, recency, cosine_distance, tokens, counted
    )
    SELECT call.project_id, call.trace_id, d.ord, d.item_type, d.item_id, d.decision, d.reason_code,
           d.rank, d.score, d.similarity, d.text_rank, d.recency, d.cosine_distance, d.tokens,
           call.counted
    FROM call CROSS JOIN d
)
INSERT INTO bench_fact_counters AS c (project_id, fact_id, served_count, excluded_count, last_served_at)
SELECT :project_id, d.item_id,
       count(*) FILTER (WHERE d.decision = 'included'),
       count(*) FILTER (WHERE d.reason_code IN ('over_budget', 'below_relevance_floor')),
       CASE WHEN bool_or(d.decision = 'included') THEN now() END
FROM d
WHERE d.item_type = 'fact'
GROUP BY d.item_id
ORDER BY d.item_id
ON CONFLICT (project_id, fact_id) DO UPDATE
SET served_count = c.served_count + excluded.served_count,
    excluded_count = c.excluded_count + excluded.excluded_count,
    last_served_at = coalesce(excluded.last_served_at, c.last_served_at);
