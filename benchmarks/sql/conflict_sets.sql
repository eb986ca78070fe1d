-- Benchmark-only statements of benchmarks/conflict_sets.py; the reads timed ship in
-- queries/conflicts.sql (list_conflicts) and queries/lifecycle.sql (erase_subject's sets).

-- name: fill_conflict_sets(n, subjects)!
-- n resolved conflict sets of project p, one a second back from now, over `subjects` subjects.
INSERT INTO conflict_sets (project_id, conflict_set_id, subject_id, key, status, created_at, resolved_at)
SELECT 'p', gen_random_uuid(), 's' || (g % :subjects::integer), 'k' || g, 'resolved',
       now() - g * interval '1 second', now()
FROM generate_series(1, :n::integer) AS g;

-- name: analyze_conflict_sets#
-- Fresh statistics after a fill or an index build.
ANALYZE conflict_sets;

-- name: drop_conflict_set_indexes#
-- The state before migration 0044.
DROP INDEX IF EXISTS conflict_sets_newest, conflict_sets_scope;

-- name: create_conflict_set_indexes#
-- Migration 0044's indexes again.
DO $$
BEGIN
    CREATE INDEX IF NOT EXISTS conflict_sets_newest
        ON conflict_sets (project_id, created_at DESC, conflict_set_id);
    CREATE INDEX IF NOT EXISTS conflict_sets_scope
        ON conflict_sets (project_id, subject_id, created_at DESC, conflict_set_id);
END $$;

-- name: scope_conflict_sets(project_id, subject_id)$
-- What a subject's erasure reads of conflict_sets (erase_subject's gone_sets), without deleting.
SELECT count(*) FROM conflict_sets AS cs WHERE cs.project_id = :project_id AND cs.subject_id = :subject_id;
