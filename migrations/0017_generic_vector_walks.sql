-- The vector walks under one generic plan (issue 13, docs/performance.md "The walks under a
-- generic plan"). Until now the walk of a context call was planned for its own parameters:
-- a generic plan cannot name the scope's partial HNSW index (migration 0008: the bucket is a
-- function of the parameters), and guessed from the average scope whether to walk a graph or
-- sort the scope. That planning cost 0.9-1.5 ms a call, more than the walk of a 10k-fact scope
-- itself, and two round trips to switch the plan mode around it.
--
-- These functions are the walks, written so that one plan, built once per connection, is right
-- for every scope:
-- * one branch per bucket, each naming its bucket as a constant (so each reaches its own
--   partial index) behind a one-time filter on the scope's bucket: only one branch runs, and
--   the 15 others cost ~5 us each;
-- * the choice between an exact scan and the walk made when the call runs, from the scope's
--   size (haki_exact_scan_limit), not by the planner from statistics;
-- * plans pinned with the function's own settings: no sequential scan and no sort where an
--   index gives the order, so no statistics (a new subject, a table one scope dominates, many
--   small scopes) can turn the walk of a big scope into a sort of all its facts, or the exact
--   scan of a small one into a read of the whole table (tests/test_index_use.py). The settings
--   hold while the function runs, its planning included, and never leak into the call.
--
-- They cannot be inlined (the SET clauses), and need not be: PostgreSQL 18 keeps a SQL
-- function's plan in the plan cache, so a call runs the cached generic plan. PARALLEL
-- RESTRICTED: a parallel worker may not change settings.

-- How many rows of a scope a walk of its bucket's graph is worth. A scope-filtered walk of the
-- bucket reads about top_k / selectivity index tuples (~6 us each), an exact scan every row of
-- the scope (~1.2 us each), so the exact scan is cheaper below sqrt(5 * top_k * bucket rows)
-- rows: 1,460 facts in a 106k-fact table, 4,500 in a 1M-fact one (docs/performance.md), and
-- never below exact_scan_min. The planner's HNSW cost ignores the iterative scan, so it cannot
-- make this choice itself.
CREATE FUNCTION public.haki_exact_scan_limit(tbl regclass, top_k integer, exact_scan_min integer)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT greatest(exact_scan_min,
                sqrt(5.0 * top_k * greatest(c.reltuples, 0) / public.haki_scope_buckets()))::bigint
FROM pg_catalog.pg_class AS c
WHERE c.oid = tbl
$$;

DO $migration$
DECLARE
    -- A walk function, written once for both tables: %1$s its name, %2$s the table, %3$s the id
    -- it returns, %4$s its parameters after `at`, %5$s the test that a row may be served (on
    -- the alias w), %6$s the column the size test reads the scope's index in, %7$s its bucket
    -- branches (bucket_walk). A scope of at most haki_exact_scan_limit rows is scanned exactly
    -- (full-precision distances, through the scope's index); a bigger one walks its bucket's
    -- graph. None for a null query; the ids come in no particular order.
    walk_function CONSTANT text := $function$
CREATE FUNCTION public.%1$s(
    p_project_id text, p_subject_id text, query vector, top_k integer, exact_scan_min integer,
    at timestamptz%4$s
) RETURNS TABLE (%3$s uuid)
LANGUAGE sql STABLE PARALLEL RESTRICTED ROWS 64
SET search_path = pg_catalog, public
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off
AS $body$
WITH exact_scan AS MATERIALIZED (
    -- Reads the scope's rows up to the limit (index-only, in the scope index's order) and asks
    -- whether one more exists.
    SELECT NOT EXISTS (
        SELECT 1
        FROM public.%2$s AS w
        WHERE w.project_id = p_project_id
          AND w.subject_id = p_subject_id
        ORDER BY w.%6$s
        OFFSET public.haki_exact_scan_limit('public.%2$s'::regclass, top_k, exact_scan_min) - 1
    ) AS small
)
(SELECT d.%3$s
 FROM (
     SELECT w.%3$s, w.embedding <=> query AS distance
     FROM public.%2$s AS w
     WHERE (SELECT x.small FROM exact_scan AS x)
       AND query IS NOT NULL
       AND w.project_id = p_project_id
       AND w.subject_id = p_subject_id
       AND %5$s
     OFFSET 0  -- computed distances, sorted below: never the HNSW ordering
 ) AS d
 ORDER BY d.distance, d.%3$s
 LIMIT top_k)%7$s
$body$$function$;
    -- One bucket's walk of its partial HNSW index: %1$s the table, %2$s the id it returns, %3$s
    -- the servability test, %4$s the bucket, %5$s the order of that index's expression. The
    -- iterative scan (hnsw.iterative_scan, set for the call) walks on past rows of other scopes
    -- until top_k rows of the scope are found.
    bucket_walk CONSTANT text := $branch$
UNION ALL
(SELECT w.%2$s
 FROM public.%1$s AS w
 WHERE NOT (SELECT x.small FROM exact_scan AS x)
   AND query IS NOT NULL
   AND public.haki_scope_bucket(p_project_id, p_subject_id) = %4$s
   AND public.haki_scope_bucket(w.project_id, w.subject_id) = %4$s
   AND w.project_id = p_project_id
   AND w.subject_id = p_subject_id
   AND %3$s
 ORDER BY %5$s
 LIMIT top_k)$branch$;
    -- A fact that may be served at `at`: servable, and in none of the scope's open ConflictSets
    -- (open_members: haki_open_conflict_facts at `at`, which the caller reads once for the whole
    -- statement, as the candidate statements need it too: 0.1-0.3 ms each time; tested on each
    -- row as one array, where a nested loop over the set cost 0.24 ms at 10k).
    fact_servable CONSTANT text :=
        'public.haki_fact_servable(w.status, w.valid_to, w.volatility, w.valid_from, '
        'w.recorded_from, w.stale_after, w.recorded_to, w.believed_valid_to, at)'
        || E'\n       AND NOT (w.fact_id = ANY (open_members))';
    -- An event that was held at `at`.
    event_held CONSTANT text := 'public.haki_event_held(w.occurred_at, w.recorded_at, at)';
    fact_walks text;
    event_walks text;
BEGIN
    SELECT string_agg(format(bucket_walk, 'facts', 'fact_id', fact_servable, b,
                             -- the fact graphs' half-precision expression (migration 0008)
                             'w.embedding::halfvec(384) <=> query::halfvec(384)'), '' ORDER BY b),
           string_agg(format(bucket_walk, 'events', 'event_id', event_held, b,
                             'w.embedding <=> query'), '' ORDER BY b)
    INTO fact_walks, event_walks
    FROM generate_series(0, public.haki_scope_buckets() - 1) AS b;

    -- The top_k servable facts of a scope closest to `query`, at the instant `at` (null: now);
    -- the size test reads facts_scope_id.
    EXECUTE format(walk_function, 'haki_fact_walk', 'facts', 'fact_id', ', open_members uuid[]',
                   fact_servable, 'fact_id', fact_walks);
    -- The top_k events of a scope closest to `query` that were held at `at` (null: now); the
    -- size test reads events_scope_occurred; the graphs are of full precision (migration 0008).
    EXECUTE format(walk_function, 'haki_event_walk', 'events', 'event_id', '', event_held,
                   'occurred_at', event_walks);
END
$migration$;
