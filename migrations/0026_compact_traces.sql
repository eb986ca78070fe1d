-- One compact record per context call (docs/performance.md, "Trace storage"): a call's decisions
-- are parallel arrays on its context_calls row, no longer one context_traces row each.
--
-- - Element i of every array is one decision; decision_positions holds its place in the order the
--   assembler made them. The elements are grouped by what they count as in a fact's statistics
--   (haki_trace_codes.part): the facts served first, then those left out over budget, then below
--   the relevance floor, then the rest; decision_served, decision_over_budget and
--   decision_below_floor count the first three groups, so each is a slice of decision_ids that
--   an index is built on without evaluating a function per decision.
-- - item_type, decision and reason_code are one smallint code (haki_trace_codes, the one mapping).
-- - rank and tokens are smallint (ranks stop at the candidates and expansions of one call; tokens
--   at MAX_CONTENT_CHARS / 4), the score parts float8: GET /v1/inspect answers the values the
--   assembler computed, to the last bit.
-- - score and similarity are stored only where they differ from haki_trace_score and
--   1 - cosine_distance: a NULL element is the derived value, NaN a NULL one. The insert
--   compares, so the answer stays exact whatever the rules become; a column of no exception is
--   NULL.
-- - A NULL decision_ids marks a call traced before this migration: its decisions stay in
--   context_traces, read beside the new form (haki_trace_decisions, haki_fact_usage) until the
--   retention purge or an erasure takes them. No rewrite of old rows, no lock held for it.
-- The arrays go to TOAST (the row passes 2 kB with a few dozen decisions), compressed by pglz
-- where it saves a quarter: lz4 is not in every PostgreSQL build Haki runs on.
ALTER TABLE public.context_calls
    ADD COLUMN decision_ids           uuid[],
    ADD COLUMN decision_positions     smallint[],
    ADD COLUMN decision_codes         smallint[],
    ADD COLUMN decision_ranks         smallint[],
    ADD COLUMN decision_tokens        smallint[],
    ADD COLUMN decision_distances     double precision[],
    ADD COLUMN decision_text_ranks    double precision[],
    ADD COLUMN decision_recencies     double precision[],
    ADD COLUMN decision_scores        double precision[],
    ADD COLUMN decision_similarities  double precision[],
    ADD COLUMN decision_served        smallint,
    ADD COLUMN decision_over_budget   smallint,
    ADD COLUMN decision_below_floor   smallint,
    -- A decision the mapping does not know fails the insert rather than storing a NULL code.
    ADD CONSTRAINT context_calls_decision_codes_known
        CHECK (array_position(decision_codes, NULL) IS NULL);

-- The codes of a decision, written once: every statement that writes or reads the compact form
-- joins this list. `part` is the group of the arrays a decision is stored in, by what it counts
-- as in a fact's statistics: 1 served, 2 left out over budget, 3 below the relevance floor (a
-- fact's excluded_count is 2 and 3), 4 neither (an episode, a blocked fact, already_served).
-- Codes are stored: a new decision takes a new code, an existing one never changes.
CREATE FUNCTION public.haki_trace_codes()
RETURNS TABLE (code smallint, item_type text, decision text, reason_code text, part smallint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT v.code::smallint, v.item_type, v.decision, v.reason_code,
       (CASE WHEN v.item_type <> 'fact' THEN 4
             WHEN v.decision = 'included' THEN 1
             WHEN v.reason_code = 'over_budget' THEN 2
             WHEN v.reason_code = 'below_relevance_floor' THEN 3
             ELSE 4
        END)::smallint
FROM (VALUES
    (1, 'fact', 'included', 'packed'),
    (2, 'fact', 'included', 'multi_hop_expansion'),
    (3, 'fact', 'excluded', 'over_budget'),
    (4, 'fact', 'excluded', 'below_relevance_floor'),
    (5, 'fact', 'excluded', 'already_served'),
    (6, 'fact', 'blocked', 'conflict_open'),
    (7, 'fact', 'blocked', 'volatility_expired'),
    (11, 'episode', 'included', 'packed'),
    (12, 'episode', 'included', 'multi_hop_expansion'),
    (13, 'episode', 'excluded', 'over_budget'),
    (14, 'episode', 'excluded', 'below_relevance_floor'),
    (15, 'episode', 'excluded', 'already_served')
) AS v(code, item_type, decision, reason_code)
$$;

-- The score a stored decision derives when it keeps none: the hybrid score of its parts under
-- the call's weights, as it was computed when this form was made. Frozen here (not the rule of
-- migrations/rules.sql): a later rule must not change what an old trace says.
CREATE FUNCTION public.haki_trace_score(
    cosine_distance double precision, text_rank double precision, recency double precision,
    weights double precision[]
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT weights[1] * coalesce(1 - cosine_distance, 0) + weights[2] * text_rank + weights[3] * recency
$$;

-- A value as stored: NULL when it is the derived one, NaN for a NULL that is not.
CREATE FUNCTION public.haki_trace_exception(given double precision, derived double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN given IS NOT DISTINCT FROM derived THEN NULL
            WHEN given IS NULL THEN 'NaN'::double precision
            ELSE given
       END
$$;

-- A stored value read back (haki_trace_exception undone).
CREATE FUNCTION public.haki_trace_value(stored double precision, derived double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN stored IS NULL THEN derived
            WHEN stored = 'NaN'::double precision THEN NULL
            ELSE stored
       END
$$;

-- What a fact is worth is three index probes, not a read of every trace: GIN indexes on the
-- slices of decision_ids that hold the facts served, left out over budget and below the floor.
-- Counted calls only (at the current instant, not a replay), as context_traces_fact_usage
-- (migration 0012). GIN keeps each fact id once with a compressed list of the calls naming it;
-- fastupdate off, as migration 0013: a pending list is read whole by every probe.
CREATE INDEX context_calls_served_facts ON public.context_calls
    USING gin ((decision_ids[1:decision_served]))
    WITH (fastupdate = off)
    WHERE as_of IS NULL AND replay_of IS NULL AND decision_ids IS NOT NULL;
CREATE INDEX context_calls_over_budget_facts ON public.context_calls
    USING gin ((decision_ids[decision_served + 1:decision_served + decision_over_budget]))
    WITH (fastupdate = off)
    WHERE as_of IS NULL AND replay_of IS NULL AND decision_ids IS NOT NULL;
CREATE INDEX context_calls_below_floor_facts ON public.context_calls
    USING gin ((decision_ids[decision_served + decision_over_budget + 1:
                             decision_served + decision_over_budget + decision_below_floor]))
    WITH (fastupdate = off)
    WHERE as_of IS NULL AND replay_of IS NULL AND decision_ids IS NOT NULL;

-- Every decision of one call, in order, from either form (GET /v1/inspect, replay, /ui).
CREATE FUNCTION public.haki_trace_decisions(p_project_id text, p_trace_id uuid)
RETURNS TABLE (
    ord bigint, item_type text, item_id uuid, decision text, reason_code text, rank integer,
    score double precision, similarity double precision, text_rank double precision,
    recency double precision, cosine_distance double precision, tokens integer
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT u.ord::bigint, k.item_type, u.item_id, k.decision, k.reason_code, u.rank::integer,
       public.haki_trace_value(u.score, public.haki_trace_score(u.distance, u.text_rank, u.recency, c.weights)),
       public.haki_trace_value(u.similarity, 1 - u.distance),
       u.text_rank, u.recency, u.distance, u.tokens::integer
FROM public.context_calls AS c
CROSS JOIN LATERAL unnest(c.decision_ids, c.decision_positions, c.decision_codes, c.decision_ranks,
                          c.decision_tokens, c.decision_distances, c.decision_text_ranks,
                          c.decision_recencies, c.decision_scores, c.decision_similarities)
    AS u(item_id, ord, code, rank, tokens, distance, text_rank, recency, score, similarity)
JOIN public.haki_trace_codes() AS k ON k.code = u.code
WHERE c.project_id = p_project_id
  AND c.trace_id = p_trace_id
UNION ALL
SELECT t.ord::bigint, t.item_type, t.item_id, t.decision, t.reason_code, t.rank, t.score,
       t.similarity, t.text_rank, t.recency, t.cosine_distance, t.tokens
FROM public.context_traces AS t
WHERE t.project_id = p_project_id
  AND t.trace_id = p_trace_id
$$;

-- What a fact is worth (migration 0012), from both forms: the counted calls naming it through the
-- slices and indexes above, and the counted rows of context_traces. A fact is decided once per
-- call, so a call counts once. last_served_at is the created_at of the newest serving call (trace
-- ids are UUIDv7: the greatest is the newest). The project is checked outside an OFFSET 0 fence:
-- inside, the GIN index is the only one that serves the probe. Given the project, a plan could
-- read the project's calls by a btree and test each one's arrays, decompressing them all (a
-- project whose statistics were stale: 4 ms a fact at 150 calls).
CREATE OR REPLACE FUNCTION public.haki_fact_usage(p_project_id text, p_fact_id uuid)
RETURNS TABLE (served_count bigint, excluded_count bigint, over_budget_count bigint,
               last_served_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT o.served_count + s.calls, o.excluded_count + b.calls + f.calls, o.over_budget_count + b.calls,
       (SELECT c.created_at
        FROM public.context_calls AS c
        WHERE c.project_id = p_project_id
          AND c.trace_id = greatest(o.last_served_trace, s.last_trace))
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
) AS o
CROSS JOIN (
    SELECT count(*) AS calls,
           (pg_catalog.array_agg(c.trace_id ORDER BY c.trace_id DESC))[1] AS last_trace
    FROM (
        SELECT c.project_id, c.trace_id
        FROM public.context_calls AS c
        WHERE c.decision_ids[1:c.decision_served] @> ARRAY[p_fact_id]
          AND c.as_of IS NULL AND c.replay_of IS NULL AND c.decision_ids IS NOT NULL
        OFFSET 0
    ) AS c
    WHERE c.project_id = p_project_id
) AS s
CROSS JOIN (
    SELECT count(*) AS calls
    FROM (
        SELECT c.project_id
        FROM public.context_calls AS c
        WHERE c.decision_ids[c.decision_served + 1:c.decision_served + c.decision_over_budget]
              @> ARRAY[p_fact_id]
          AND c.as_of IS NULL AND c.replay_of IS NULL AND c.decision_ids IS NOT NULL
        OFFSET 0
    ) AS c
    WHERE c.project_id = p_project_id
) AS b
CROSS JOIN (
    SELECT count(*) AS calls
    FROM (
        SELECT c.project_id
        FROM public.context_calls AS c
        WHERE c.decision_ids[c.decision_served + c.decision_over_budget + 1:
                             c.decision_served + c.decision_over_budget + c.decision_below_floor]
              @> ARRAY[p_fact_id]
          AND c.as_of IS NULL AND c.replay_of IS NULL AND c.decision_ids IS NOT NULL
        OFFSET 0
    ) AS c
    WHERE c.project_id = p_project_id
) AS f
$$;
