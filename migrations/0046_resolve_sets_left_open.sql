-- An open conflict set left with fewer than two active members becomes resolved at that instant
-- (docs/spec/api.md, "Conflicts"). Releases before resolve_left_conflict_sets left such a set
-- open when a member was retracted, superseded or erased, and its last claim stayed hidden from
-- every context call (conflict_open); the runtime only resolves a set when one of its members
-- changes, so the sets stored that way are resolved here, as that statement resolves them:
-- status and resolved_at = now() (the instant the set is recorded resolved: an earlier call
-- did not serve the claim, and a replay of it must not), conflict.resolved from the trigger.
-- The claims are counted as haki_conflict_claims counts them, written out: rules.sql (re)creates
-- that function after the numbered migrations, and a database of an earlier release lacks it.
UPDATE public.conflict_sets AS cs
SET status = 'resolved',
    resolved_at = now()
WHERE cs.status = 'open'
  AND (
      SELECT pg_catalog.count(*)
      FROM public.conflict_members AS m
      JOIN public.facts AS f ON f.project_id = m.project_id AND f.fact_id = m.fact_id
      WHERE m.project_id = cs.project_id
        AND m.conflict_set_id = cs.conflict_set_id
        AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, NULL::timestamptz)
  ) < 2;
