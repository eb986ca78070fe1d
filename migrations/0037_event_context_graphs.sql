-- Rule 8 at every scope size (docs/spec/context-profiles.md): a scope too big for the exact scan
-- walks the HNSW graph of its events' vectors in context. With the own vectors' graph alone, an
-- episode found only by its vector in context was missed: LoCoMo with every walk on its graph
-- 0.877, with the graph of the vectors in context 0.883, the exact scan's figure (docs/quality.md).
--
-- - Once every event of the scope has its vector in context, that graph alone is walked: a vector
--   in context holds its event's own text too. While some are still to be made (the worker is
--   behind, or HAKI_EVENT_CONTEXT is off), and for a call as of an earlier instant, the own
--   vectors' graph is walked as well. Either way the walk keeps the top_k it found by the closer
--   of each event's two vectors, as the exact scan does. One walk, as before: the CI guard's
--   `unified` path measured 1.61x `facts_first` walking both graphs on every call.
-- - The write path is unchanged: only the vectors the worker stores enter the new graphs.
-- - One graph per scope bucket, as the own vectors' (migration 0008), of half-precision copies
--   (the walk only picks the rows; their distances come from the full vectors).
SET LOCAL maintenance_work_mem = '512MB';

-- Whether a scope has events still to be made, one probe (the worker's queue is by project).
CREATE INDEX events_context_pending_scope ON public.events (project_id, subject_id)
    WHERE context_embedding IS NULL;

DO $migration$
BEGIN
    FOR b IN 0 .. public.haki_scope_buckets() - 1 LOOP
        EXECUTE format(
            'CREATE INDEX events_context_hnsw_%s ON public.events '
            'USING hnsw ((context_embedding::public.halfvec(384)) public.halfvec_cosine_ops) '
            'WHERE public.haki_scope_bucket(project_id, subject_id) = %s',
            lpad(b::text, 2, '0'), b);
    END LOOP;
END
$migration$;

-- The graph walk of a big scope's vectors in context, as haki_event_graph_walk's of their own
-- (migration 0022: one branch per bucket, its partial index, one generic plan), of the events held
-- at `at` whose vector in context was made by then (migration 0036).
DO $migration$
DECLARE
    branch CONSTANT text := $branch$
    WHEN %1$s THEN
        RETURN QUERY
        SELECT w.event_id
        FROM public.events AS w
        WHERE public.haki_scope_bucket(w.project_id, w.subject_id) = %1$s
          AND w.project_id = p_project_id
          AND w.subject_id = p_subject_id
          AND public.haki_event_held(w.occurred_at, w.recorded_at, at)
          AND (at IS NULL OR w.context_made_at <= at)
        ORDER BY w.context_embedding::halfvec(384) <=> query::halfvec(384)
        LIMIT top_k;$branch$;
    branches text;
BEGIN
    SELECT string_agg(format(branch, b), '' ORDER BY b)
    INTO branches
    FROM generate_series(0, public.haki_scope_buckets() - 1) AS b;
    EXECUTE format($function$
CREATE FUNCTION public.haki_event_context_graph_walk(
    p_project_id text, p_subject_id text, query vector, top_k integer, at timestamptz
) RETURNS TABLE (event_id uuid)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED ROWS 64
SET search_path = pg_catalog, public
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off
AS $body$
BEGIN
    -- No ELSE: a bucket without a branch is a bug of the migrations, and says so.
    CASE public.haki_scope_bucket(p_project_id, p_subject_id)%s
    END CASE;
END
$body$$function$, branches);
END
$migration$;

-- haki_event_context_walk (migration 0036), a big scope's walk as above.
CREATE OR REPLACE FUNCTION public.haki_event_context_walk(
    p_project_id text, p_subject_id text, query public.vector, top_k integer,
    exact_scan_min integer, at timestamptz
) RETURNS TABLE (event_id uuid)
LANGUAGE sql STABLE ROWS 64 PARALLEL RESTRICTED
SET search_path TO 'pg_catalog', 'public'
SET plan_cache_mode TO 'force_generic_plan'
SET enable_seqscan TO 'off'
SET enable_sort TO 'off'
AS $$
WITH exact_scan AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1
        FROM public.events AS w
        WHERE w.project_id = p_project_id
          AND w.subject_id = p_subject_id
        ORDER BY w.occurred_at
        OFFSET public.haki_exact_scan_limit('public.events'::regclass, top_k, exact_scan_min) - 1
    ) AS small
)
(SELECT d.event_id
 FROM (
     SELECT w.event_id,
            public.haki_episode_distance(w.embedding, w.context_embedding, w.context_made_at, query, at)
                AS distance
     FROM public.events AS w
     WHERE (SELECT x.small FROM exact_scan AS x)
       AND query IS NOT NULL
       AND w.project_id = p_project_id
       AND w.subject_id = p_subject_id
       AND public.haki_event_held(w.occurred_at, w.recorded_at, at)
     OFFSET 0  -- computed distances, sorted below: never the HNSW ordering
 ) AS d
 ORDER BY d.distance, d.event_id
 LIMIT top_k)
UNION ALL
(SELECT e.event_id
 FROM (
     SELECT c.event_id
     FROM public.haki_event_context_graph_walk(p_project_id, p_subject_id, query, top_k, at) AS c
     UNION
     SELECT o.event_id
     FROM public.haki_event_graph_walk(p_project_id, p_subject_id, query, top_k, at) AS o
     WHERE at IS NOT NULL
        OR EXISTS (SELECT 1
                   FROM public.events AS p
                   WHERE p.project_id = p_project_id
                     AND p.subject_id = p_subject_id
                     AND p.context_embedding IS NULL)
 ) AS g
 JOIN public.events AS e ON e.project_id = p_project_id AND e.event_id = g.event_id
 WHERE NOT (SELECT x.small FROM exact_scan AS x)
   AND query IS NOT NULL
 ORDER BY public.haki_episode_distance(e.embedding, e.context_embedding, e.context_made_at, query, at),
          e.event_id
 LIMIT top_k)
$$;
