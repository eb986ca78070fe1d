-- name: lift_migration_timeouts()^
-- A migration runner's transaction without the request timeouts: a migration may build an index
-- for minutes, and a runner waits for another's lock that long. Scoped to the transaction, as
-- every setting of Haki's, so a transaction-pooling pgBouncer hands on no session state.
SELECT set_config('statement_timeout', '0', true) AS statement_timeout,
       set_config('lock_timeout', '0', true) AS lock_timeout;

-- name: try_lock_migrations()$
-- The migration lock if no other runner holds it (false: one does, the caller logs and waits);
-- released when the transaction ends.
SELECT pg_try_advisory_xact_lock(7274626173) AS locked;

-- name: lock_migrations()$
-- Serialises concurrent migration runners (two `haki` processes starting at once), each migration
-- a transaction under this lock; released when the transaction ends.
SELECT pg_advisory_xact_lock(7274626173) AS locked;

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
