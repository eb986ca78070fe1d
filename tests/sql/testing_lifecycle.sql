-- Test-only statements of tests/test_lifecycle.py. Never called by the service.

-- name: test_tenant_catalog()
-- Every table of the public schema with a project_id column, read from the catalog so that a
-- table added later is covered, and whether it has a subject_id column. (The server has no
-- libxml, so query_to_xml cannot count each table in SQL: tests/test_lifecycle.py counts them.)
SELECT c.table_name::text AS table_name,
       EXISTS (
           SELECT 1
           FROM information_schema.columns AS s
           WHERE s.table_schema = 'public'
             AND s.table_name = c.table_name
             AND s.column_name = 'subject_id'
       ) AS has_subject
FROM information_schema.columns AS c
JOIN information_schema.tables AS tb
  ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
WHERE c.table_schema = 'public'
  AND c.column_name = 'project_id'
  AND tb.table_type = 'BASE TABLE'
ORDER BY c.table_name;

-- name: test_backdate_context_calls(project_id, trace_ids, days)!
-- Moves context calls of a project the given number of days into the past (retention tests).
UPDATE context_calls
SET created_at = created_at - make_interval(days => :days)
WHERE project_id = :project_id
  AND trace_id = ANY(:trace_ids::uuid[]);

-- name: test_context_call_counts(project_id)^
-- The context calls of a project and their decisions: a call's arrays (migration 0026), and the
-- context_traces rows of calls traced before.
SELECT (SELECT count(*) FROM context_calls AS c WHERE c.project_id = :project_id) AS calls,
       (SELECT count(*) FROM context_traces AS t WHERE t.project_id = :project_id)
       + (SELECT coalesce(sum(cardinality(c.decision_ids)), 0)
          FROM context_calls AS c
          WHERE c.project_id = :project_id)::bigint AS decisions;

-- name: test_erasures(project_id, subject_id)
-- The audit rows of one scope's erasures, every column.
SELECT e.erasure_id, e.subject_id, e.kind, e.facts, e.events, e.conflict_sets, e.conflict_members,
       e.context_calls, e.decisions, e.idempotency_keys, e.erased_at, e.key_id
FROM erasures AS e
WHERE e.project_id = :project_id
  AND e.subject_id = :subject_id
ORDER BY e.erased_at, e.erasure_id;

-- name: test_lock_context_call(project_id, trace_id)^
-- Locks one context call until the caller's transaction ends (a request holding it).
SELECT c.trace_id
FROM context_calls AS c
WHERE c.project_id = :project_id
  AND c.trace_id = :trace_id
FOR UPDATE;

-- name: test_set_idempotency_subject(project_id, idempotency_key, subject_id)!
-- Moves an Idempotency-Key record to another scope, or to none (a record claimed before
-- migration 0042 kept no subject).
UPDATE idempotency_keys
SET subject_id = :subject_id
WHERE project_id = :project_id
  AND idempotency_key = :idempotency_key;

-- name: test_waits_on_a_lock(pid)$
-- Whether the session `pid` is waiting on a lock now (pg_stat_activity), to force an interleaving.
SELECT a.wait_event_type = 'Lock' AS waiting
FROM pg_stat_activity AS a
WHERE a.pid = :pid;

-- name: test_open_conflict_set(project_id, subject_id, key)!
-- Inserts an open conflict set of a key (held uncommitted by a test, a write of the key waits on it).
INSERT INTO conflict_sets (project_id, conflict_set_id, subject_id, key)
VALUES (:project_id, gen_random_uuid(), :subject_id, :key);

-- name: test_fact_contents(project_id)$
-- The contents of a project's facts, in order, NULL for none.
SELECT array_agg(f.content ORDER BY f.content) AS contents
FROM facts AS f
WHERE f.project_id = :project_id;

-- name: test_lock_event(project_id, event_id)!
-- Locks one event's row until the transaction ends.
SELECT 1 AS locked
FROM events AS e
WHERE e.project_id = :project_id
  AND e.event_id = :event_id
FOR UPDATE;

-- name: test_lock_timeout(milliseconds)!
-- How long the transaction's statements wait for a lock (then LockNotAvailableError).
SELECT set_config('lock_timeout', :milliseconds::integer || 'ms', true) AS lock_timeout;
