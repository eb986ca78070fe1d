-- Idempotency-Key records (migration 0006): claimed, filled and read inside the write's transaction.

-- name: find_idempotent_response(project_id, idempotency_key)^
-- The live (unexpired) record of one Idempotency-Key of a project, to replay a retry.
SELECT request_sha256, status_code, response
FROM idempotency_keys
WHERE project_id = :project_id
  AND idempotency_key = :idempotency_key
  AND expires_at > now()
  AND status_code IS NOT NULL;

-- name: claim_idempotency_key(project_id, subject_id, idempotency_key, request_sha256, ttl_seconds)$
-- Claims a key for the current transaction (new, or expired and reused); NULL when a live record
-- exists. A concurrent claim of the same key waits on the unique index until this transaction
-- ends, and the conflicting row stays locked even when the WHERE clause skips the update. The
-- record keeps the write's scope, where the erasures that may take it look (migration 0042).
INSERT INTO idempotency_keys (project_id, subject_id, idempotency_key, request_sha256, expires_at)
VALUES (
    :project_id, :subject_id, :idempotency_key, :request_sha256,
    now() + make_interval(secs => :ttl_seconds::float8)
)
ON CONFLICT (project_id, idempotency_key) DO UPDATE
SET subject_id = EXCLUDED.subject_id,
    request_sha256 = EXCLUDED.request_sha256,
    status_code = NULL,
    response = NULL,
    created_at = now(),
    expires_at = EXCLUDED.expires_at
WHERE idempotency_keys.expires_at <= now()
RETURNING idempotency_key;

-- name: store_idempotent_response(project_id, idempotency_key, status_code, response)!
-- Records the response of the write that claimed the key, in that write's transaction.
UPDATE idempotency_keys
SET status_code = :status_code,
    response = :response
WHERE project_id = :project_id
  AND idempotency_key = :idempotency_key;

-- name: purge_idempotency_keys(project_id, max_rows)!
-- Deletes up to max_rows expired records of a project; rows another transaction holds are skipped.
DELETE FROM idempotency_keys AS k
USING (
    SELECT x.project_id, x.idempotency_key
    FROM idempotency_keys AS x
    WHERE x.project_id = :project_id
      AND x.expires_at <= now()
    LIMIT :max_rows
    FOR UPDATE SKIP LOCKED
) AS expired
WHERE k.project_id = :project_id
  AND k.project_id = expired.project_id
  AND k.idempotency_key = expired.idempotency_key;
