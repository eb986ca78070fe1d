-- name: lift_migration_timeouts()^
-- The migration runner's session without the request timeouts until restore_migration_timeouts:
-- a migration may build an index for minutes, and a runner waits for another's lock that long.
SELECT set_config('statement_timeout', '0', false) AS statement_timeout,
       set_config('lock_timeout', '0', false) AS lock_timeout;

-- name: restore_migration_timeouts#
-- Gives the session back the timeouts it was opened with, once the migrations are done.
RESET statement_timeout;
RESET lock_timeout;

-- name: try_lock_migrations()$
-- The migration lock if no other runner holds it (false: one does, the caller logs and waits).
SELECT pg_try_advisory_lock(7274626173) AS locked;

-- name: lock_migrations()$
-- Serialises concurrent migration runners (two `haki` processes starting at once).
SELECT pg_advisory_lock(7274626173) AS locked;

-- name: unlock_migrations()$
-- Releases the migration lock taken by lock_migrations.
SELECT pg_advisory_unlock(7274626173) AS unlocked;

-- name: create_schema_migrations#
-- Bookkeeping table of applied migrations with the sha256 of each file as applied.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     text        PRIMARY KEY,
    sha256      text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations()
-- Every migration already applied, with the checksum recorded at the time.
SELECT version, sha256
FROM schema_migrations
ORDER BY version;

-- name: record_migration(version, sha256)!
-- Marks one migration file as applied, inside that migration's transaction.
INSERT INTO schema_migrations (version, sha256) VALUES (:version, :sha256);

-- name: record_rules(version, sha256)!
-- Records the sha256 of migrations/rules.sql as applied, replacing the one recorded before.
INSERT INTO schema_migrations (version, sha256) VALUES (:version, :sha256)
ON CONFLICT (version) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now();

-- name: forget_rules(version)!
-- Forgets the rules' record inside a numbered migration's transaction: the rules run again after it.
DELETE FROM schema_migrations WHERE version = :version;
