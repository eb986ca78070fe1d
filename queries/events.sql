-- name: insert_events(project_id, subject_id, event_ids, contents, occurred_ats, metadatas, embeddings)!
-- Writes a whole batch of events in one statement (arrays unnested in input order).
INSERT INTO events (project_id, event_id, subject_id, content, occurred_at, metadata, embedding)
SELECT :project_id, t.event_id, :subject_id, t.content, t.occurred_at,
       coalesce(t.metadata, '{}'::jsonb), t.embedding
FROM unnest(
    :event_ids::uuid[], :contents::text[], :occurred_ats::timestamptz[], :metadatas::jsonb[],
    :embeddings::vector[]
) AS t(event_id, content, occurred_at, metadata, embedding);

-- name: missing_events(project_id, subject_id, event_ids)
-- The ids among event_ids that are not events of this scope (for source_event_id checks).
SELECT t.event_id
FROM unnest(:event_ids::uuid[]) AS t(event_id)
WHERE NOT EXISTS (
    SELECT 1
    FROM events AS e
    WHERE e.project_id = :project_id
      AND e.subject_id = :subject_id
      AND e.event_id = t.event_id
);
