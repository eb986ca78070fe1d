-- Read replicas (service/db/replica.py, docs/scaling.md "Read replicas").
-- None of these reads a table: they are server-level positions in the write-ahead log.

-- name: wal_insert_lsn()$
-- The primary's WAL insert position, read right after a write committed on the same connection:
-- a standby whose replay position reached it has replayed that write. Also the lag monitor's
-- sample of the primary.
SELECT pg_current_wal_insert_lsn() AS lsn;

-- name: standby_position()^
-- The read pool's server: still a standby (a promoted one has its own history and serves no
-- reads), and how far it has replayed the primary's WAL.
SELECT pg_is_in_recovery() AS in_recovery,
       pg_last_wal_replay_lsn() AS replay_lsn;
