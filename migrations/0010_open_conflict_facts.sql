-- The facts of a scope's open ConflictSets, which the context statements never serve and trace
-- as blocked (spec/context-assembler.md, hard filters). One definition instead of the same
-- join in each statement; read from the scope's few open sets (conflict_sets_one_open_per_key),
-- once per statement, and tested against each row as an array (docs/performance.md).
CREATE FUNCTION public.haki_open_conflict_facts(p_project_id text, p_subject_id text) RETURNS uuid[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT coalesce(array_agg(DISTINCT cm.fact_id), '{}'::uuid[])
FROM public.conflict_sets AS cs
JOIN public.conflict_members AS cm
  ON cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id
WHERE cs.project_id = p_project_id
  AND cs.subject_id = p_subject_id
  AND cs.status = 'open'
$$;
