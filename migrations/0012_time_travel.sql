-- Time travel (docs/time-travel.md): transaction time on facts, the context rules evaluated at
-- an instant (`as_of`), traced replays, and the trace index that counts what each fact is worth.

-- Transaction time. A fact is believed from recorded_from until recorded_to: the instant it was
-- superseded, retracted, or lost a conflict resolution (set by those statements, in the same
-- UPDATE). Null while the fact is active. The status changes rewrite valid_to (a superseded
-- fact ends where its successor starts); believed_valid_to keeps the valid_to the fact carried
-- while it was believed, so a view as of an earlier instant judges validity as it was then.
ALTER TABLE facts
    ADD COLUMN recorded_to timestamptz,
    ADD COLUMN believed_valid_to timestamptz;

-- Backfill of the facts that stopped being believed before this migration (there is no
-- updated_at column to read the instant from):
-- - superseded by a successor (`supersedes`): the successor's recorded_from, which is exact (the
--   successor and the status change were written by one transaction);
-- - superseded by a conflict resolution: the resolved_at of the resolved set holding it (exact);
-- - anything else (retractions): unknown; the instant this migration runs, which is an upper
--   bound. A view as of an instant before the migration may therefore still show a fact that was
--   retracted before that instant (documented in docs/time-travel.md).
UPDATE facts AS f
SET recorded_to = b.recorded_to,
    believed_valid_to = f.valid_to
FROM (
    SELECT x.project_id, x.fact_id,
           coalesce(s.recorded_to, CASE WHEN x.status = 'superseded' THEN r.recorded_to END, now())
               AS recorded_to
    FROM facts AS x
    LEFT JOIN (
        SELECT n.project_id, n.supersedes AS fact_id, min(n.recorded_from) AS recorded_to
        FROM facts AS n
        WHERE n.supersedes IS NOT NULL
        GROUP BY n.project_id, n.supersedes
    ) AS s ON s.project_id = x.project_id AND s.fact_id = x.fact_id
    LEFT JOIN (
        SELECT cm.project_id, cm.fact_id, max(cs.resolved_at) AS recorded_to
        FROM conflict_members AS cm
        JOIN conflict_sets AS cs
          ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
        WHERE cs.status = 'resolved'
        GROUP BY cm.project_id, cm.fact_id
    ) AS r ON r.project_id = x.project_id AND r.fact_id = x.fact_id
    WHERE x.status <> 'active'
) AS b
WHERE f.project_id = b.project_id
  AND f.fact_id = b.fact_id;

-- Believed exactly while active: every status change must set recorded_to.
ALTER TABLE facts
    ADD CONSTRAINT facts_recorded_to_iff_inactive CHECK ((status = 'active') = (recorded_to IS NULL));

-- What each context call was asked, so that a replay rebuilds it: the request's include_episodes
-- and the recall floor in force (both null for calls logged before this migration: a replay
-- then uses true and the deployment's floor), the instant it was evaluated at (null: its
-- created_at) and the trace it replays (null: a call of POST /v1/context).
ALTER TABLE context_calls
    ADD COLUMN include_episodes boolean,
    ADD COLUMN recall_max_distance double precision,
    ADD COLUMN as_of timestamptz,
    ADD COLUMN replay_of uuid;

-- What each fact is worth (GET /v1/stats/facts), counted from the traces: decisions of calls
-- made at the current instant (not as-of calls, not replays) are `counted`. A fact's decisions
-- are found through this partial index on the fact id alone (UUIDv7 ids are unique across
-- projects; the rows carry project_id, which the reads check). Measured on the trace write of
-- 256 decisions (benchmarks/trace_usage.py, docs/performance.md, "What each memory is worth"):
-- counters maintained by the write cost 2.3-4.8x the write, an index on (project_id, item_id,
-- trace_id) INCLUDE (decision, reason_code) 1.6x, this one 1.25-1.43x (+0.35 to +0.7 ms): its
-- tuples are a third of the size. Reads pay a heap fetch per decision instead.
ALTER TABLE context_traces ADD COLUMN counted boolean NOT NULL DEFAULT true;
CREATE INDEX context_traces_fact_usage ON context_traces (item_id)
    WHERE item_type = 'fact' AND counted;

-- What a fact is worth, from the counted decisions of the traces still stored (a retention job
-- that deletes old traces lowers the counts with them): how often it was served, how often it
-- was a candidate left out for the budget or below the relevance floor (excluded_count, of which
-- over_budget_count for the budget), and when it was last served (the created_at of its newest
-- serving call: trace ids are UUIDv7, so the greatest is the newest). One index scan.
CREATE FUNCTION public.haki_fact_usage(p_project_id text, p_fact_id uuid)
RETURNS TABLE (served_count bigint, excluded_count bigint, over_budget_count bigint,
               last_served_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT u.served_count, u.excluded_count, u.over_budget_count,
       (SELECT c.created_at
        FROM public.context_calls AS c
        WHERE c.project_id = p_project_id AND c.trace_id = u.last_served_trace)
FROM (
    SELECT count(*) FILTER (WHERE t.decision = 'included') AS served_count,
           count(*) FILTER (WHERE t.reason_code IN ('over_budget', 'below_relevance_floor'))
               AS excluded_count,
           count(*) FILTER (WHERE t.reason_code = 'over_budget') AS over_budget_count,
           (pg_catalog.array_agg(t.trace_id ORDER BY t.trace_id DESC)
                FILTER (WHERE t.decision = 'included'))[1] AS last_served_trace
    FROM public.context_traces AS t
    WHERE t.item_id = p_fact_id
      AND t.item_type = 'fact'
      AND t.counted
      AND t.project_id = p_project_id
) AS u
$$;

-- The rules at an instant. Each context rule that read now() takes `at`: null is the current
-- instant (every POST /v1/context without as_of), anything else an as-of call or a replay.
-- With `at` null the planner folds each function to the rule of migrations 0010 and 0011 (a
-- custom plan sees the constant; the partial indexes those rules use are read by branches
-- gated on `at IS NULL`, a one-time filter in a generic plan).

-- A fact believed at an instant: active now, or recorded by `at` and not yet recorded_to.
CREATE FUNCTION public.haki_fact_believed(
    status text, recorded_from timestamptz, recorded_to timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN at IS NULL THEN status = 'active'
            ELSE recorded_from <= at AND (recorded_to IS NULL OR recorded_to > at) END
$$;

-- The valid_to a fact carried at an instant: its valid_to while it is believed, and the one it
-- had until recorded_to (believed_valid_to) once a status change rewrote it.
CREATE FUNCTION public.haki_valid_to_at(
    valid_to timestamptz, recorded_to timestamptz, believed_valid_to timestamptz, at timestamptz
) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN at IS NULL OR recorded_to IS NULL THEN valid_to ELSE believed_valid_to END
$$;

-- A fact still business-valid at an instant, by the valid_to it carried then.
CREATE FUNCTION public.haki_fact_valid(
    valid_to timestamptz, recorded_to timestamptz, believed_valid_to timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_valid_to_at(valid_to, recorded_to, believed_valid_to, at) IS NULL
    OR public.haki_valid_to_at(valid_to, recorded_to, believed_valid_to, at) > coalesce(at, pg_catalog.now())
$$;

-- A volatile fact gone stale by an instant.
CREATE FUNCTION public.haki_fact_stale(
    volatility text, valid_from timestamptz, recorded_from timestamptz, stale_after interval,
    at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT volatility = 'volatile'
   AND coalesce(valid_from, recorded_from) + stale_after <= coalesce(at, pg_catalog.now())
$$;

-- An event the memory held at an instant: it had occurred and had been recorded.
CREATE FUNCTION public.haki_event_held(occurred_at timestamptz, recorded_at timestamptz, at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT at IS NULL OR (occurred_at <= at AND recorded_at <= at)
$$;

-- haki_fact_servable of migration 0011 at an instant.
CREATE FUNCTION public.haki_fact_servable(
    status text, valid_to timestamptz, volatility text, valid_from timestamptz,
    recorded_from timestamptz, stale_after interval, recorded_to timestamptz,
    believed_valid_to timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_fact_believed(status, recorded_from, recorded_to, at)
   AND public.haki_fact_valid(valid_to, recorded_to, believed_valid_to, at)
   AND NOT public.haki_fact_stale(volatility, valid_from, recorded_from, stale_after, at)
$$;

-- haki_recency of migration 0011, measured from an instant.
CREATE FUNCTION public.haki_recency(dated_at timestamptz, tau_seconds double precision, at timestamptz)
RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT least(1.0, pg_catalog.exp(-least(700.0,
    greatest(0.0, extract(epoch FROM coalesce(at, pg_catalog.now()) - dated_at)) / tau_seconds)))
$$;

-- haki_open_conflict_facts of migration 0010 at an instant: the sets open then (created by
-- `at`, not resolved by `at`). The current instant reads the open sets through
-- conflict_sets_one_open_per_key as before.
CREATE FUNCTION public.haki_open_conflict_facts(p_project_id text, p_subject_id text, at timestamptz)
RETURNS uuid[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT coalesce(array_agg(DISTINCT m.fact_id), '{}'::uuid[])
FROM (
    SELECT cm.fact_id
    FROM public.conflict_sets AS cs
    JOIN public.conflict_members AS cm
      ON cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id
    WHERE at IS NULL
      AND cs.project_id = p_project_id
      AND cs.subject_id = p_subject_id
      AND cs.status = 'open'
    UNION ALL
    SELECT cm.fact_id
    FROM public.conflict_sets AS cs
    JOIN public.conflict_members AS cm
      ON cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id
    WHERE at IS NOT NULL
      AND cs.project_id = p_project_id
      AND cs.subject_id = p_subject_id
      AND cs.created_at <= at
      AND (cs.resolved_at IS NULL OR cs.resolved_at > at)
) AS m
$$;

-- haki_blocked_facts of migration 0011 at an instant. The stale volatile facts of the current
-- instant are read through facts_scope_volatile_active (its predicate spelled out: the branch
-- is haki_fact_believed at a null instant); those of an earlier instant from the scope's
-- volatile facts of any status.
CREATE FUNCTION public.haki_blocked_facts(p_project_id text, p_subject_id text, at timestamptz)
RETURNS TABLE (fact_id uuid, reason_code text, tokens integer)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH open_members AS MATERIALIZED (
    SELECT u.fact_id
    FROM pg_catalog.unnest(public.haki_open_conflict_facts(p_project_id, p_subject_id, at)) AS u(fact_id)
)
SELECT f.fact_id, 'conflict_open', public.haki_tokens(f.content)
FROM open_members AS om
JOIN public.facts AS f ON f.project_id = p_project_id AND f.fact_id = om.fact_id
WHERE f.subject_id = p_subject_id
  AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, at)
  AND public.haki_fact_valid(f.valid_to, f.recorded_to, f.believed_valid_to, at)
UNION ALL
SELECT f.fact_id, 'volatility_expired', public.haki_tokens(f.content)
FROM public.facts AS f
WHERE at IS NULL
  AND f.project_id = p_project_id
  AND f.subject_id = p_subject_id
  AND f.status = 'active'
  AND f.volatility = 'volatile'
  AND public.haki_fact_valid(f.valid_to, f.recorded_to, f.believed_valid_to, at)
  AND public.haki_fact_stale(f.volatility, f.valid_from, f.recorded_from, f.stale_after, at)
  AND NOT EXISTS (SELECT 1 FROM open_members AS om WHERE om.fact_id = f.fact_id)
UNION ALL
SELECT f.fact_id, 'volatility_expired', public.haki_tokens(f.content)
FROM public.facts AS f
WHERE at IS NOT NULL
  AND f.project_id = p_project_id
  AND f.subject_id = p_subject_id
  AND f.volatility = 'volatile'
  AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, at)
  AND public.haki_fact_valid(f.valid_to, f.recorded_to, f.believed_valid_to, at)
  AND public.haki_fact_stale(f.volatility, f.valid_from, f.recorded_from, f.stale_after, at)
  AND NOT EXISTS (SELECT 1 FROM open_members AS om WHERE om.fact_id = f.fact_id)
$$;

-- haki_scope_sample of migration 0011 at an instant: the newest facts believed then and the
-- newest events held then.
CREATE FUNCTION public.haki_scope_sample(
    p_project_id text, p_subject_id text, config regconfig, sample_docs integer, at timestamptz
) RETURNS TABLE (sv tsvector)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT fs.sv
FROM (
    SELECT public.haki_text_vector(config, f.search_vector, f.search_vector_english) AS sv
    FROM public.facts AS f
    WHERE f.project_id = p_project_id
      AND f.subject_id = p_subject_id
      AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, at)
    ORDER BY f.fact_id DESC
    LIMIT sample_docs
) AS fs
UNION ALL
SELECT es.sv
FROM (
    SELECT public.haki_text_vector(config, e.search_vector, e.search_vector_english) AS sv
    FROM public.events AS e
    WHERE e.project_id = p_project_id
      AND e.subject_id = p_subject_id
      AND public.haki_event_held(e.occurred_at, e.recorded_at, at)
    ORDER BY e.occurred_at DESC
    LIMIT sample_docs
) AS es
$$;

-- haki_query_idf of migration 0011 over the sample of an instant, as its parts: the words of a
-- query with the size of the sample (docs) and how many of its texts name each (df). The unified
-- text side takes BM25's idf of them (haki_bm25_idf), and the share df / docs that the probe of
-- migration 0013 reads.
CREATE FUNCTION public.haki_query_df(
    p_project_id text, p_subject_id text, query text, config regconfig, max_words integer,
    sample_docs integer, at timestamptz
) RETURNS TABLE (word text, word_query tsquery, docs bigint, df bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH words AS MATERIALIZED (
    SELECT w.word, w.word_query
    FROM public.haki_query_words(query, config, max_words) AS w
    WHERE pg_catalog.numnode(w.word_query) > 0
),
sample AS MATERIALIZED (
    SELECT s.sv
    FROM public.haki_scope_sample(p_project_id, p_subject_id, config, sample_docs, at) AS s
    WHERE EXISTS (SELECT 1 FROM words)
)
SELECT w.word, w.word_query, (SELECT count(*) FROM sample),
       (SELECT count(*) FROM sample AS s WHERE s.sv OPERATOR(pg_catalog.@@) w.word_query)
FROM words AS w
$$;

-- No statement reads migration 0011's haki_query_idf any more: unified_candidates reads the parts.
DROP FUNCTION public.haki_query_idf(text, text, text, regconfig, integer, integer);

-- The rules of migrations 0010 and 0011 without an instant are the rules at the current one:
-- one definition each (the statements of queries/context.sql call the versions above).
CREATE OR REPLACE FUNCTION public.haki_open_conflict_facts(p_project_id text, p_subject_id text)
RETURNS uuid[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_open_conflict_facts(p_project_id, p_subject_id, NULL::timestamptz)
$$;

CREATE OR REPLACE FUNCTION public.haki_recency(dated_at timestamptz, tau_seconds double precision)
RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_recency(dated_at, tau_seconds, NULL::timestamptz)
$$;

CREATE OR REPLACE FUNCTION public.haki_fact_servable(
    status text, valid_to timestamptz, volatility text, valid_from timestamptz,
    recorded_from timestamptz, stale_after interval
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_fact_servable(status, valid_to, volatility, valid_from, recorded_from,
                                 stale_after, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz)
$$;

CREATE OR REPLACE FUNCTION public.haki_blocked_facts(p_project_id text, p_subject_id text)
RETURNS TABLE (fact_id uuid, reason_code text, tokens integer)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT b.fact_id, b.reason_code, b.tokens
FROM public.haki_blocked_facts(p_project_id, p_subject_id, NULL::timestamptz) AS b
$$;

CREATE OR REPLACE FUNCTION public.haki_scope_sample(
    p_project_id text, p_subject_id text, config regconfig, sample_docs integer
) RETURNS TABLE (sv tsvector)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT s.sv FROM public.haki_scope_sample(p_project_id, p_subject_id, config, sample_docs, NULL::timestamptz) AS s
$$;

