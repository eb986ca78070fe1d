-- Test-only statements of tests/test_reembed.py and tests/test_embed_model_choice.py. Never called
-- by the service.

-- name: test_project_vectors(project_id)
-- Every fact and event of a project with its served vector, to compare with an embedder's.
SELECT 'fact' AS kind, f.fact_id AS item_id, f.content AS content, f.embedding AS embedding
FROM facts AS f
WHERE f.project_id = :project_id
UNION ALL
SELECT 'event' AS kind, e.event_id AS item_id, e.content AS content, e.embedding AS embedding
FROM events AS e
WHERE e.project_id = :project_id;

-- name: test_pending_vectors(project_id)^
-- How many vectors of a re-embedding wait beside a project's served ones.
SELECT (SELECT count(*) FROM reembedded_facts AS rf WHERE rf.project_id = :project_id)
     + (SELECT count(*) FROM reembedded_events AS re WHERE re.project_id = :project_id) AS pending;

-- name: test_context_call_count(project_id)$
-- How many context calls a project has traced.
SELECT count(*) AS calls FROM context_calls AS c WHERE c.project_id = :project_id;
