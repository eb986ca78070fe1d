-- Test-only statements of tests/test_event_context.py. Never called by the service.

-- name: test_event_context_vectors(project_id, subject_id)
-- A scope's events with their own vector and their vector in context (null: not made yet).
SELECT e.event_id AS event_id, e.content AS content, e.embedding AS embedding,
       e.context_embedding AS context_embedding
FROM events AS e
WHERE e.project_id = :project_id
  AND e.subject_id = :subject_id
ORDER BY e.occurred_at, e.event_id;
