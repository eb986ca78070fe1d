-- The vector walks start only the graph they walk (issue 13, docs/performance.md "The walks
-- start one graph"). Migration 0017 wrote each walk as one SQL function whose plan holds the
-- exact scan and one branch per scope bucket, each behind a one-time filter: only one branch
-- runs, but every call starts all of them, and starting an HNSW index scan is not free. Timed
-- per call on a 100-fact scope, the fact walk cost 0.53 ms over a bare round trip where its
-- exact scan alone cost 0.19 ms; at 10k facts the whole walk cost 2.8-3.1 ms against 2.4 ms for
-- the same walk starting one graph.
--
-- Each walk keeps its exact scan, and the graph walk of a big scope moves to a PL/pgSQL
-- function (haki_fact_graph_walk, haki_event_graph_walk) that runs the one branch of the
-- scope's bucket: PL/pgSQL plans and starts a statement only when it reaches it. Its call sits
-- behind the walk's one-time filter, so a small scope never enters it. Each branch keeps what
-- migration 0017 gave it: its bucket as a constant (so it reaches its own partial index), one
-- generic plan, cached per connection, and the walk's own settings (no sequential scan, no
-- sort), which hold while the branch is planned and run. Same rows, same order of the exact
-- scan; the walks' signatures do not change, nor do the statements that call them.

DO $migration$
DECLARE
    -- What both kinds of function are, and the settings that pin their plans (migration 0017):
    -- they hold while a statement of the function is planned and run, and never leak out.
    pinned CONSTANT text := $pinned$STABLE PARALLEL RESTRICTED ROWS 64
SET search_path = pg_catalog, public
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off$pinned$;
    -- The graph walk of a scope too big for an exact scan: %1$s its name, %2$s the id it
    -- returns, %3$s its parameters after `at`, %4$s the branches (graph_branch, which name the
    -- table), %5$s pinned.
    graph_function CONSTANT text := $function$
CREATE FUNCTION public.%1$s(
    p_project_id text, p_subject_id text, query vector, top_k integer, at timestamptz%3$s
) RETURNS TABLE (%2$s uuid)
LANGUAGE plpgsql %5$s
AS $body$
BEGIN
    -- No ELSE: a bucket without a branch is a bug of the migrations, and says so.
    CASE public.haki_scope_bucket(p_project_id, p_subject_id)%4$s
    END CASE;
END
$body$$function$;
    -- One bucket's walk of its partial HNSW index: %1$s the table, %2$s the id it returns, %3$s
    -- the servability test, %4$s the bucket, %5$s the order of that index's expression. The
    -- iterative scan (hnsw.iterative_scan, set for the call) walks on past rows of other scopes
    -- until top_k rows of the scope are found.
    graph_branch CONSTANT text := $branch$
    WHEN %4$s THEN
        RETURN QUERY
        SELECT w.%2$s
        FROM public.%1$s AS w
        WHERE public.haki_scope_bucket(w.project_id, w.subject_id) = %4$s
          AND w.project_id = p_project_id
          AND w.subject_id = p_subject_id
          AND %3$s
        ORDER BY %5$s
        LIMIT top_k;$branch$;
    -- A walk: %1$s its name, %2$s the table, %3$s the id it returns, %4$s its parameters after
    -- `at`, %5$s the test that a row may be served (on the alias w), %6$s the column the size
    -- test reads the scope's index in, %7$s its graph walk, %8$s that walk's arguments after
    -- `at`, %9$s pinned. A scope of at most haki_exact_scan_limit rows is scanned exactly (full-precision
    -- distances, through the scope's index); a bigger one walks its bucket's graph. None for a
    -- null query; the ids come in no particular order.
    walk_function CONSTANT text := $function$
CREATE OR REPLACE FUNCTION public.%1$s(
    p_project_id text, p_subject_id text, query vector, top_k integer, exact_scan_min integer,
    at timestamptz%4$s
) RETURNS TABLE (%3$s uuid)
LANGUAGE sql %9$s
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
 LIMIT top_k)
UNION ALL
SELECT g.%3$s
FROM public.%7$s(p_project_id, p_subject_id, query, top_k, at%8$s) AS g
WHERE NOT (SELECT x.small FROM exact_scan AS x)
  AND query IS NOT NULL
$body$$function$;
    -- A fact that may be served at `at`: servable, and in none of the scope's open ConflictSets
    -- (open_members: haki_open_conflict_facts at `at`, which the caller reads once; migration
    -- 0017).
    fact_servable CONSTANT text :=
        'public.haki_fact_servable(w.status, w.valid_to, w.volatility, w.valid_from, '
        'w.recorded_from, w.stale_after, w.recorded_to, w.believed_valid_to, at)'
        || E'\n          AND NOT (w.fact_id = ANY (open_members))';
    -- An event that was held at `at`.
    event_held CONSTANT text := 'public.haki_event_held(w.occurred_at, w.recorded_at, at)';
    fact_branches text;
    event_branches text;
BEGIN
    SELECT string_agg(format(graph_branch, 'facts', 'fact_id', fact_servable, b,
                             -- the fact graphs' half-precision expression (migration 0008)
                             'w.embedding::halfvec(384) <=> query::halfvec(384)'), '' ORDER BY b),
           string_agg(format(graph_branch, 'events', 'event_id', event_held, b,
                             'w.embedding <=> query'), '' ORDER BY b)
    INTO fact_branches, event_branches
    FROM generate_series(0, public.haki_scope_buckets() - 1) AS b;

    EXECUTE format(graph_function, 'haki_fact_graph_walk', 'fact_id', ', open_members uuid[]',
                   fact_branches, pinned);
    EXECUTE format(graph_function, 'haki_event_graph_walk', 'event_id', '', event_branches,
                   pinned);
    -- The top_k servable facts of a scope closest to `query`, at the instant `at` (null: now);
    -- the size test reads facts_scope_id.
    EXECUTE format(walk_function, 'haki_fact_walk', 'facts', 'fact_id', ', open_members uuid[]',
                   fact_servable, 'fact_id', 'haki_fact_graph_walk', ', open_members', pinned);
    -- The top_k events of a scope closest to `query` that were held at `at` (null: now); the
    -- size test reads events_scope_occurred; the graphs are of full precision (migration 0008).
    EXECUTE format(walk_function, 'haki_event_walk', 'events', 'event_id', '', event_held,
                   'occurred_at', 'haki_event_graph_walk', '', pinned);
END
$migration$;
