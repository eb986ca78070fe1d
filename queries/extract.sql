-- name: list_extract_known_facts(project_id, subject_id, max_facts)
-- The active facts of one scope shown to the extraction model (POST /v1/extract): keyed facts
-- first (they are the slots a new fact may conflict with or replace), then the newest.
-- Two bounded reads, each newest first, then merged: one sort over the whole scope took 68-71 ms
-- on a 100k-fact scope (1 % keyed), these 3.5-6.2 ms (benchmarks/extract_known_facts.py).
SELECT k.fact_id, k.key, k.content, k.volatility
FROM (
    (SELECT f.fact_id, f.key, f.content, f.volatility
     FROM facts AS f
     WHERE f.project_id = :project_id
       AND f.subject_id = :subject_id
       AND f.status = 'active'
       AND f.key IS NOT NULL
     ORDER BY f.fact_id DESC
     LIMIT :max_facts)
    UNION ALL
    (SELECT f.fact_id, f.key, f.content, f.volatility
     FROM facts AS f
     WHERE f.project_id = :project_id
       AND f.subject_id = :subject_id
       AND f.status = 'active'
       AND f.key IS NULL
     ORDER BY f.fact_id DESC
     LIMIT :max_facts)
) AS k
ORDER BY (k.key IS NULL), k.fact_id DESC
LIMIT :max_facts;
