-- Statements behind GET /metrics. Metrics carry no tenant label (unbounded cardinality), so
-- these are the documented cross-project aggregates (tests/test_query_scoping.py lists them).

-- name: count_open_conflicts_all_projects()$
-- Open conflict sets across every project, for the haki_open_conflicts gauge (an index-only
-- scan of the partial index conflict_sets_one_open_per_key).
SELECT count(*) AS open_conflicts
FROM conflict_sets
WHERE status = 'open';

-- name: count_event_contexts_pending_all_projects()$
-- Events whose vector in context (migration 0035) is still to be made, across every project, for
-- the haki_event_context_pending gauge: the partial index events_context_pending, counted up to
-- 100,001 rows, so a scrape stays cheap while an upgrade's backlog is worked off.
SELECT count(*) AS pending
FROM (
    SELECT 1 AS one
    FROM events AS e
    WHERE e.context_embedding IS NULL
    LIMIT 100001
) AS p;
