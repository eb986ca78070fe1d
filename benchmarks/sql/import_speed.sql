-- Benchmark-only statements of benchmarks/import_speed.py.

-- name: bench_scope_buckets(project_id, subject_ids)
-- The scope bucket (migration 0008: the partial HNSW index a scope's vectors go to) of each
-- subject id of a project.
SELECT s.subject_id AS subject_id,
       public.haki_scope_bucket(:project_id, s.subject_id) AS bucket
FROM unnest(:subject_ids::text[]) WITH ORDINALITY AS s(subject_id, ord)
ORDER BY s.ord;
