-- Benchmark-only statements of benchmarks/extract_known_facts.py. The form that ships is
-- list_extract_known_facts in queries/extract.sql.

-- name: drop_unused_facts_indexes#
-- The vector and text indexes of facts: not read by the statements compared, slow to fill.
DO $$
DECLARE idx text;
BEGIN
    FOR idx IN
        SELECT i.indexname FROM pg_indexes AS i
        WHERE i.tablename = 'facts' AND (i.indexdef ILIKE '%hnsw%' OR i.indexdef ILIKE '%gin%')
    LOOP
        EXECUTE format('DROP INDEX %I', idx);
    END LOOP;
END $$;

-- name: fill_scope(n)!
-- n active facts in scope (p, s), one in a hundred with a key.
INSERT INTO facts (project_id, fact_id, subject_id, content, key, embedding)
SELECT 'p', gen_random_uuid(), 's', 'fact ' || i,
       CASE WHEN i % 100 = 0 THEN 'k' || (i % 5000) END,
       array_fill(0.01::real, ARRAY[384])::vector
FROM generate_series(1, :n) AS i;

-- name: known_facts_one_sort(project_id, subject_id, max_facts)
-- The first form: one sort over the scope's active facts.
SELECT f.fact_id, f.key, f.content, f.volatility
FROM facts AS f
WHERE f.project_id = :project_id AND f.subject_id = :subject_id AND f.status = 'active'
ORDER BY (f.key IS NULL), f.fact_id DESC
LIMIT :max_facts;
