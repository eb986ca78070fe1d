-- Benchmark-only statements of benchmarks/replica.py: the remote_apply configuration of the
-- throw-away primary. ALTER SYSTEM runs outside a transaction block, so one per statement.

-- name: bench_set_synchronous_standbys()#
-- Every connected standby becomes synchronous (first come), so commits can wait for it.
ALTER SYSTEM SET synchronous_standby_names = '*';

-- name: bench_set_remote_apply()#
-- Commits wait until the synchronous standby has applied them.
ALTER SYSTEM SET synchronous_commit = 'remote_apply';

-- name: bench_reset_synchronous_standbys()#
-- Back to asynchronous replication.
ALTER SYSTEM RESET synchronous_standby_names;

-- name: bench_reset_remote_apply()#
-- Back to the default synchronous_commit.
ALTER SYSTEM RESET synchronous_commit;

-- name: bench_reload_conf()$
-- Applies the ALTER SYSTEM changes above.
SELECT pg_reload_conf() AS reloaded;
