-- Test-only statements of the read-replica tests (tests/test_replica.py): positions and counters
-- of the primary and of its streaming standby, read directly. Never called by the service.

-- name: test_primary_wal_position()$
-- The primary's WAL insert position now: the standby has replayed everything once it passes it.
SELECT pg_current_wal_insert_lsn() AS lsn;

-- name: test_standby_replayed(lsn)$
-- Whether the standby has replayed the primary's WAL up to lsn.
SELECT pg_last_wal_replay_lsn() >= :lsn::pg_lsn AS replayed;

-- name: test_pause_replay()$
-- Stops the standby's replay (lag on demand); it keeps receiving WAL.
SELECT pg_wal_replay_pause()::text AS paused;

-- name: test_resume_replay()$
-- Resumes the standby's replay.
SELECT pg_wal_replay_resume()::text AS resumed;

-- name: test_replay_paused()$
-- Whether the pause requested by test_pause_replay has taken effect.
SELECT pg_get_wal_replay_pause_state() = 'paused' AS paused;

-- name: test_fact_scans()$
-- Scans of the facts table on this server (sequential and index): a context retrieval always
-- scans it, the replica monitor never reads a table.
SELECT coalesce(sum(coalesce(t.seq_scan, 0) + coalesce(t.idx_scan, 0)), 0)::bigint AS scans
FROM pg_stat_user_tables AS t
WHERE t.relname = 'facts';

-- name: test_count_context_calls(project_id)$
-- The context calls traced for a project (on the primary).
SELECT count(*) AS calls
FROM context_calls AS c
WHERE c.project_id = :project_id;
