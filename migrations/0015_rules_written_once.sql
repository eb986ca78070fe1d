-- Rules written once (issue 17): the rules that queries/ and benchmarks/sql/ still spelled out
-- in each statement. Each function is LANGUAGE sql, one SELECT, not STRICT, no SET, not
-- SECURITY DEFINER, and no more volatile than its callers, so the planner inlines it: a
-- statement that calls it plans as the copy it replaces (tests/test_sql_rules.py checks both).

-- The text rank of spec/context-assembler.md (facts_first): ts_rank_cd normalised with flag 32,
-- rank / (rank + 1), bounded in [0, 1). The only place the flag is written. `real`, as
-- ts_rank_cd returns: the traces store the same values as before.
CREATE FUNCTION public.haki_text_rank(sv tsvector, q tsquery) RETURNS real
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT pg_catalog.ts_rank_cd(sv, q, 32)
$$;

-- Recency (haki_recency, migrations 0011 and 0012) of a fact: dated by valid_from when the
-- writer gave one, else by when it was recorded (spec/context-assembler.md, scoring).
CREATE FUNCTION public.haki_fact_recency(
    valid_from timestamptz, recorded_from timestamptz, tau_seconds double precision, at timestamptz
) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_recency(coalesce(valid_from, recorded_from), tau_seconds, at)
$$;

-- The members of a project's open ConflictSets (spec, hard filters: such a fact is never
-- served), with their set. For the statements that test facts one by one (get_fact, list_facts,
-- the benchmarks' baseline), correlated on fact_id in the caller's WHERE: the context statements
-- read a scope's members at once instead (haki_open_conflict_facts, migrations 0010 and 0012).
-- A table function, inlined where it is called, so the plan is the join's own; the fact is not
-- an argument, because a correlated argument keeps `NOT EXISTS` from becoming an anti-join.
CREATE FUNCTION public.haki_open_conflict_members(p_project_id text)
RETURNS TABLE (fact_id uuid, conflict_set_id uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT cm.fact_id, cs.conflict_set_id
FROM public.conflict_members AS cm
JOIN public.conflict_sets AS cs
  ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
WHERE cm.project_id = p_project_id
  AND cs.status = 'open'
$$;

-- A fact as GET /v1/facts shows it (spec/API.md): its columns, the open ConflictSet it sits in,
-- if any, and what it is worth (haki_fact_usage, migration 0012). One shape for get_fact and
-- list_facts, which filter it; inlined, so each plans as the join it replaces (the caller's
-- filters and LIMIT reach the facts scan).
CREATE FUNCTION public.haki_fact_rows(p_project_id text)
RETURNS TABLE (
    fact_id uuid, project_id text, subject_id text, content text, key text, status text,
    valid_from timestamptz, valid_to timestamptz, recorded_from timestamptz, volatility text,
    stale_after_seconds bigint, supersedes uuid, source_event_id uuid, metadata jsonb,
    conflict_set_id uuid, recorded_to timestamptz, served_count bigint,
    last_served_at timestamptz, excluded_count bigint
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT f.fact_id, f.project_id, f.subject_id, f.content, f.key, f.status, f.valid_from, f.valid_to,
       f.recorded_from, f.volatility,
       extract(epoch FROM f.stale_after)::bigint,
       f.supersedes, f.source_event_id, f.metadata,
       oc.conflict_set_id, f.recorded_to,
       u.served_count, u.last_served_at, u.excluded_count
FROM public.facts AS f
CROSS JOIN LATERAL public.haki_fact_usage(f.project_id, f.fact_id) AS u
LEFT JOIN LATERAL (
    SELECT o.conflict_set_id
    FROM public.haki_open_conflict_members(f.project_id) AS o
    WHERE o.fact_id = f.fact_id
    LIMIT 1
) AS oc ON true
WHERE f.project_id = p_project_id
$$;
