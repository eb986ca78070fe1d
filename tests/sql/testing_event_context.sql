-- Test-only statements of tests/test_event_context.py. Never called by the service.

-- name: test_event_context_vectors(project_id, subject_id)
-- A scope's events with their own vector and their vector in context (null: not made yet).
SELECT e.event_id AS event_id, e.content AS content, e.embedding AS embedding,
       e.context_embedding AS context_embedding
FROM events AS e
WHERE e.project_id = :project_id
  AND e.subject_id = :subject_id
ORDER BY e.occurred_at, e.event_id;

-- name: test_exact_scan_limit(top_k)$
-- The number of a scope's events beyond which haki_event_context_walk walks its graphs.
SELECT public.haki_exact_scan_limit('public.events'::regclass, :top_k, 1) AS exact_scan_limit;

-- name: test_event_context_walk(project_id, subject_id, query, top_k)
-- What haki_event_context_walk returns for a scope, the scope too big for the exact scan
-- (exact_scan_min 1): the walk of both graphs.
SELECT w.event_id AS event_id
FROM public.haki_event_context_walk(:project_id, :subject_id, :query::vector, :top_k, 1, NULL) AS w;

-- name: test_event_nearest(project_id, subject_id, query, top_k, both)
-- A scope's top_k events by exact distance: by the closer of their two vectors (both), or by
-- their own alone.
SELECT e.event_id AS event_id
FROM events AS e
WHERE e.project_id = :project_id
  AND e.subject_id = :subject_id
ORDER BY CASE WHEN :both::boolean
              THEN public.haki_episode_distance(e.embedding, e.context_embedding, e.context_made_at,
                                                :query::vector, NULL)
              ELSE e.embedding <=> :query::vector
         END,
         e.event_id
LIMIT :top_k;
