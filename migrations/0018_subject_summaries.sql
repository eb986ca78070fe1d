-- A subject's counts and last write, read through its scope's indexes (GET /v1/subjects,
-- queries/lifecycle.sql list_subjects). The listing grouped every row of the project after its
-- cursor for each page (63 ms for a page of 3 at 106k facts, and more with every fact); it now
-- finds its page's subjects with a loose index scan and reads each one's rows here.
--
-- The plan is pinned, as the walks' of migration 0017 are: the subject is a value of the
-- caller's row, so the planner sizes it by the table's average subject, and where a few
-- subjects hold most of the table it read the whole table for each subject of the page (six
-- sequential scans of 5,036 rows for a page of six subjects of 3 facts,
-- tests/test_index_use.py). Through the scope indexes (facts_scope_id, events_scope_id) a
-- subject costs its own rows. Not inlined (the SET clauses), called once per subject of a page.
CREATE FUNCTION public.haki_subject_summary(p_project_id text, p_subject_id text)
RETURNS TABLE (facts bigint, events bigint, last_write_at timestamptz)
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, public
SET enable_seqscan = off
AS $$
SELECT fc.facts, ec.events, greatest(fc.last_write_at, ec.last_write_at)
FROM (
    SELECT count(*) AS facts, max(f.recorded_from) AS last_write_at
    FROM public.facts AS f
    WHERE f.project_id = p_project_id
      AND f.subject_id = p_subject_id
) AS fc
CROSS JOIN (
    SELECT count(*) AS events, max(e.recorded_at) AS last_write_at
    FROM public.events AS e
    WHERE e.project_id = p_project_id
      AND e.subject_id = p_subject_id
) AS ec
$$;
