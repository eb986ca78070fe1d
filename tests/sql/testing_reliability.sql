-- Test-only statements of the reliability tests (tests/test_fuzz.py, test_db_faults.py,
-- test_idempotency.py, test_secrets.py). Never called by the service; every name starts with test_.

-- name: test_create_fuzz_database#
-- A scratch database for the fuzzer, so what it writes never mixes with the other tests' data.
CREATE DATABASE haki_fuzz;

-- name: test_drop_fuzz_database#
-- Drops the fuzzer's scratch database, closing any connection still open on it.
DROP DATABASE IF EXISTS haki_fuzz WITH (FORCE);

-- name: test_stored_key_hashes(project_id)
-- What api_keys holds for a project's keys (to show that only the sha256 is stored).
SELECT key_id, key_hash
FROM api_keys
WHERE project_id = :project_id;

-- name: test_idempotency_record(project_id, idempotency_key)^
-- One Idempotency-Key record of a project, expired or not.
SELECT request_sha256, status_code, response, created_at, expires_at
FROM idempotency_keys
WHERE project_id = :project_id
  AND idempotency_key = :idempotency_key;

-- name: test_expire_idempotency_keys(project_id)!
-- Ages every Idempotency-Key record of a project past its expiry (instead of sleeping a TTL).
UPDATE idempotency_keys
SET created_at = created_at - interval '2 days',
    expires_at = now() - interval '1 second'
WHERE project_id = :project_id;

-- name: test_count_project_events(project_id)$
-- Number of events of a project (no route lists events).
SELECT count(*)
FROM events
WHERE project_id = :project_id;

-- name: test_lock_facts_table()!
-- Holds facts in ACCESS EXCLUSIVE mode until the caller's transaction ends (as a migration
-- rewriting the table would), so a context read waits into its statement timeout.
LOCK TABLE facts IN ACCESS EXCLUSIVE MODE;

-- name: test_terminate_backend(pid)$
-- Ends another session's connection, as a server shutdown or a network fault would.
SELECT pg_terminate_backend(:pid::integer) AS terminated;
