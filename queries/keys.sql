-- name: insert_api_key(project_id, key_id, key_hash, label)!
-- Stores a new API key of a project; only the sha256 of the key is kept.
INSERT INTO api_keys (project_id, key_id, key_hash, label)
VALUES (:project_id, :key_id, :key_hash, :label);

-- name: find_api_key(key_hash)^
-- Authenticates a request: the project and key id of an unrevoked key with this hash.
-- api_keys is a small reference table (replicated, not distributed, under Citus).
SELECT project_id, key_id, key_hash
FROM api_keys
WHERE key_hash = :key_hash
  AND revoked_at IS NULL;

-- name: revoke_api_key(project_id, key_id)$
-- Revokes one key of a project at once; returns the key id, or NULL when there is no such live key.
UPDATE api_keys
SET revoked_at = now()
WHERE project_id = :project_id
  AND key_id = :key_id
  AND revoked_at IS NULL
RETURNING key_id;

-- name: list_api_keys(project_id)
-- The keys of one project (a NULL project, every project's), newest first, without their hashes.
SELECT project_id, key_id, label, created_at, revoked_at
FROM api_keys
WHERE (:project_id::text IS NULL OR project_id = :project_id)
ORDER BY created_at DESC, key_id;
