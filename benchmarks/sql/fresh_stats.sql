-- Benchmark-only statements of benchmarks/fresh_stats.py (and extract_known_facts.py): planner
-- statistics after a bulk write.

-- name: bench_facts_since_analyze()^
-- Rows of facts changed since its last ANALYZE (by the statistics keeper or autovacuum).
SELECT s.n_mod_since_analyze AS n_mod
FROM pg_catalog.pg_stat_user_tables AS s
WHERE s.relname = 'facts';

-- name: bench_analyze_facts#
-- New planner statistics for facts, by hand, as autovacuum would gather them.
ANALYZE facts;

-- name: bench_vacuum_facts#
-- A vacuum of facts (visibility map, free space), by hand.
VACUUM facts;
