-- Benchmark-only statements of benchmarks/analyze_cost.py: what an ANALYZE of the memory tables
-- costs with and without statistics of the scoped full-text index expressions.

-- name: bench_keyed_postings_statistics_on#
-- The expressions' statistics collected again, as before migration 0033.
ALTER INDEX public.facts_scoped_search_gin ALTER COLUMN 1 SET STATISTICS -1;
ALTER INDEX public.facts_scoped_english_gin ALTER COLUMN 1 SET STATISTICS -1;
ALTER INDEX public.events_scoped_search_gin ALTER COLUMN 1 SET STATISTICS -1;
ALTER INDEX public.events_scoped_english_gin ALTER COLUMN 1 SET STATISTICS -1;

-- name: bench_keyed_postings_statistics_off#
-- As migration 0033 leaves them: not collected.
ALTER INDEX public.facts_scoped_search_gin ALTER COLUMN 1 SET STATISTICS 0;
ALTER INDEX public.facts_scoped_english_gin ALTER COLUMN 1 SET STATISTICS 0;
ALTER INDEX public.events_scoped_search_gin ALTER COLUMN 1 SET STATISTICS 0;
ALTER INDEX public.events_scoped_english_gin ALTER COLUMN 1 SET STATISTICS 0;

-- name: bench_analyze_events#
-- New planner statistics for events, by hand.
ANALYZE events;
