-- Planner statistics of the memory tables, kept fresh after bulk writes by the service's
-- statistics keeper (service/memory/statistics.py, docs/performance.md).

-- name: memory_table_row_estimates()
-- The planner's row estimates of facts and events (pg_class.reltuples; -1 before a table's first
-- ANALYZE): the keeper refreshes a table once this process has written a share of it.
SELECT c.relname::text AS table_name, c.reltuples::bigint AS row_estimate
FROM pg_catalog.pg_class AS c
WHERE c.oid IN ('public.facts'::regclass, 'public.events'::regclass);

-- name: analyze_facts()!
-- New planner statistics for facts: a sample of at most 30,000 rows (its cost: docs/performance.md,
-- "Statistics after bulk writes").
-- SKIP_LOCKED: when autovacuum is analyzing the table already, nothing waits.
ANALYZE (SKIP_LOCKED) public.facts;

-- name: analyze_events()!
-- The same for events.
ANALYZE (SKIP_LOCKED) public.events;
