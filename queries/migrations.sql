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
