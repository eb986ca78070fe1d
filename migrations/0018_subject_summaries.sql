-- GET /v1/subjects (queries/lifecycle.sql list_subjects) grouped every row of the project after
-- its cursor for each page (63 ms for a page of 3 at 106k facts, and more with every fact). It
-- now steps from subject to subject (haki_next_subject) and reads each one's rows
-- (haki_subject_summary), through the scope indexes.

-- The first subject id of a project after `after_subject` (NULL: the first of all) that has a
-- fact or an event: one descent of facts_scope_id and one of events_scope_id. Two arms rather
-- than (after_subject IS NULL OR subject_id > after_subject), which a generic plan cannot seek
-- on: it read the project's index from its start to the cursor (8 ms at 10k subjects).
CREATE FUNCTION public.haki_next_subject(p_project_id text, after_subject text)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT least(
    CASE WHEN after_subject IS NULL
         THEN (SELECT f.subject_id FROM public.facts AS f
               WHERE f.project_id = p_project_id
               ORDER BY f.subject_id LIMIT 1)
         ELSE (SELECT f.subject_id FROM public.facts AS f
               WHERE f.project_id = p_project_id AND f.subject_id > after_subject
               ORDER BY f.subject_id LIMIT 1)
    END,
    CASE WHEN after_subject IS NULL
         THEN (SELECT e.subject_id FROM public.events AS e
               WHERE e.project_id = p_project_id
               ORDER BY e.subject_id LIMIT 1)
         ELSE (SELECT e.subject_id FROM public.events AS e
               WHERE e.project_id = p_project_id AND e.subject_id > after_subject
               ORDER BY e.subject_id LIMIT 1)
    END)
$$;

-- A subject's counts and last write.
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
