-- Statements of the trace inspector pages (/ui/traces). Read-only.

-- name: list_recent_context_calls(project_id, subject_id, page_size)
-- The latest context calls of a project, newest first, optionally of one subject only.
SELECT c.trace_id, c.subject_id, c.query, c.created_at, c.budget_tokens, c.used_tokens, c.status,
       c.warnings, c.empty_reason, c.facts_served, c.episodes_served
FROM context_calls AS c
WHERE c.project_id = :project_id
  AND (:subject_id::text IS NULL OR c.subject_id = :subject_id)
ORDER BY c.created_at DESC, c.trace_id DESC
LIMIT :page_size;

-- name: list_trace_items(project_id, trace_id)
-- Every decision of one context call in assembler order, with the text of the fact or event it
-- is about (NULL if that item is gone).
SELECT t.ord, t.item_type, t.item_id, t.decision, t.reason_code, t.rank, t.score, t.similarity,
       t.text_rank, t.recency, t.cosine_distance, t.tokens,
       coalesce(f.content, e.content) AS content,
       f.status AS fact_status,
       e.occurred_at
FROM context_traces AS t
LEFT JOIN facts AS f
  ON t.item_type = 'fact' AND f.project_id = t.project_id AND f.fact_id = t.item_id
LEFT JOIN events AS e
  ON t.item_type = 'episode' AND e.project_id = t.project_id AND e.event_id = t.item_id
WHERE t.project_id = :project_id
  AND t.trace_id = :trace_id
ORDER BY t.ord;
