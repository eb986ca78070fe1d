-- benchmarks/webhook_outbox.py: what the outbox adds to a write.

-- name: bench_count_outbox_rows(project_id)$
-- The project's outbox rows.
SELECT count(*) AS rows
FROM webhook_outbox AS o
WHERE o.project_id = :project_id;
