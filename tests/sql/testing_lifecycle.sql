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
