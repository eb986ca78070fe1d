-- Statements behind GET /metrics. Metrics carry no tenant label (unbounded cardinality), so
-- these are the documented cross-project aggregates (tests/test_query_scoping.py lists them).

-- name: count_open_conflicts_all_projects()$
-- Open conflict sets across every project, for the haki_open_conflicts gauge (an index-only
-- scan of the partial index conflict_sets_one_open_per_key).
SELECT count(*) AS open_conflicts
FROM conflict_sets
WHERE status = 'open';
