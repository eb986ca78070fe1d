-- Test-only statements of tests/test_traces_compact.py: how a trace is stored, and the trace as
-- it was written before migration 0026 (one context_traces row per decision).

-- name: test_trace_form(project_id, trace_id)^
-- Where one call's decisions are: the call row's arrays and their groups, and context_traces rows.
SELECT cardinality(c.decision_ids) AS compact,
       (SELECT count(*)
        FROM context_traces AS t
        WHERE t.project_id = c.project_id
          AND t.trace_id = c.trace_id) AS rows,
       c.decision_scores IS NULL AS no_score_stored,
       c.decision_similarities IS NULL AS no_similarity_stored,
       c.decision_served AS served,
       c.decision_over_budget AS over_budget,
       c.decision_below_floor AS below_floor
FROM context_calls AS c
WHERE c.project_id = :project_id
  AND c.trace_id = :trace_id;

-- name: test_insert_row_trace(project_id, trace_id, subject_id, query, profile, weights, decisions)!
-- A call traced before migration 0026: its row without arrays, one context_traces row a decision.
WITH call AS (
    INSERT INTO context_calls (
        project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status,
        include_episodes, recall_max_distance, text_search_config, weights
    )
    VALUES (:project_id, :trace_id, :subject_id, :query, :profile, 500, 100, 'ok', true, 0,
            'english', :weights::float8[])
    RETURNING project_id, trace_id
)
INSERT INTO context_traces (
    project_id, trace_id, ord, item_type, item_id, decision, reason_code, rank, score,
    similarity, text_rank, recency, cosine_distance, tokens, counted
)
SELECT call.project_id, call.trace_id, t.ord, t.item_type, t.item_id, t.decision, t.reason_code,
       t.rank, t.score, t.similarity, t.text_rank, t.recency, t.cosine_distance, t.tokens, true
FROM call
CROSS JOIN ROWS FROM (
    json_to_recordset(:decisions::json) AS (
        item_type text, item_id uuid, decision text, reason_code text, rank integer,
        score float8, similarity float8, text_rank float8, recency float8,
        cosine_distance float8, tokens integer
    )
) WITH ORDINALITY AS t(item_type, item_id, decision, reason_code, rank, score, similarity,
                       text_rank, recency, cosine_distance, tokens, ord);

-- name: test_backdate_all_context_calls(project_id, days)!
-- Moves every context call of a project the given number of days into the past.
UPDATE context_calls
SET created_at = created_at - make_interval(days => :days)
WHERE project_id = :project_id;

-- name: test_analyze_context_calls()!
-- Fresh planner statistics of the calls table (its expression indexes' included).
ANALYZE context_calls;
