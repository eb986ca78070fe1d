-- name: list_extract_known_facts(project_id, subject_id, max_facts)
-- The active facts of one scope shown to the extraction model (POST /v1/extract): keyed facts
-- first (they are the slots a new fact may conflict with or replace), then the newest.
SELECT f.fact_id, f.key, f.content, f.volatility
FROM facts AS f
WHERE f.project_id = :project_id
  AND f.subject_id = :subject_id
  AND f.status = 'active'
ORDER BY (f.key IS NULL), f.fact_id DESC
LIMIT :max_facts;
