-- name: list_conflicts(project_id, subject_id, status, conflict_set_id, before_created_at, before_set_id, page_members)
-- One page of a project's conflict sets (optionally one subject, status or set), newest first
-- and after the cursor (the last set of the page before), one row per member. A page holds
-- whole sets until the next would take it past page_members rows; a first set larger than that
-- comes alone, whole. `more` says a set follows the page.
WITH candidates AS (
    -- Each set takes a row at least: no page holds more sets than this.
    SELECT cs.conflict_set_id, cs.project_id, cs.subject_id, cs.key, cs.status, cs.created_at,
           cs.resolved_at
    FROM conflict_sets AS cs
    WHERE cs.project_id = :project_id
      AND (:subject_id::text IS NULL OR cs.subject_id = :subject_id)
      AND (:status::text IS NULL OR cs.status = :status)
      AND (:conflict_set_id::uuid IS NULL OR cs.conflict_set_id = :conflict_set_id)
      AND (:before_created_at::timestamptz IS NULL
           OR cs.created_at < :before_created_at
           OR (cs.created_at = :before_created_at AND cs.conflict_set_id > :before_set_id::uuid))
    ORDER BY cs.created_at DESC, cs.conflict_set_id
    LIMIT :page_members::integer + 1
),
sized AS (
    -- The rows the page holds up to each set (an empty set's row lists it, empty).
    SELECT c.conflict_set_id, c.project_id, c.subject_id, c.key, c.status, c.created_at,
           c.resolved_at,
           row_number() OVER w AS place,
           sum(greatest(m.member_count, 1)) OVER w AS rows_through
    FROM candidates AS c
    CROSS JOIN LATERAL (
        SELECT count(*) AS member_count
        FROM conflict_members AS cm
        WHERE cm.project_id = :project_id AND cm.conflict_set_id = c.conflict_set_id
    ) AS m
    WINDOW w AS (ORDER BY c.created_at DESC, c.conflict_set_id ROWS UNBOUNDED PRECEDING)
),
page AS (
    SELECT s.conflict_set_id, s.project_id, s.subject_id, s.key, s.status, s.created_at,
           s.resolved_at
    FROM sized AS s
    WHERE s.place = 1 OR s.rows_through <= :page_members::integer
)
SELECT p.conflict_set_id, p.project_id, p.subject_id, p.key, p.status, p.created_at,
       p.resolved_at,
       f.fact_id, f.content, f.status AS fact_status, f.valid_from, f.recorded_from,
       (SELECT count(*) FROM sized) > (SELECT count(*) FROM page) AS more
FROM page AS p
LEFT JOIN (
    conflict_members AS cm
    JOIN facts AS f ON f.project_id = cm.project_id AND f.fact_id = cm.fact_id
) ON cm.project_id = :project_id AND cm.conflict_set_id = p.conflict_set_id
ORDER BY p.created_at DESC, p.conflict_set_id, f.fact_id;

-- name: get_conflict_set_scope(project_id, conflict_set_id)^
-- The subject and key of one conflict set (neither ever changes): a resolution takes that key's
-- lock (lock_fact_keys) before it locks the set, so a write of the key waits for it. With its
-- member count, by which the resolution's statement timeout grows (members become superseded).
SELECT cs.subject_id AS subject_id,
       cs.key AS key,
       (SELECT count(*)
        FROM conflict_members AS cm
        WHERE cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id) AS members
FROM conflict_sets AS cs
WHERE cs.project_id = :project_id
  AND cs.conflict_set_id = :conflict_set_id;

-- name: lock_conflict_set(project_id, conflict_set_id)^
-- Locks one conflict set for resolution; returns its status, its member ids and those of its
-- members still active (a retracted or superseded member cannot be kept).
SELECT cs.status,
       array(
           SELECT cm.fact_id
           FROM conflict_members AS cm
           WHERE cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id
       ) AS member_ids,
       array(
           SELECT cm.fact_id
           FROM conflict_members AS cm
           JOIN facts AS f ON f.project_id = cm.project_id AND f.fact_id = cm.fact_id
           WHERE cm.project_id = cs.project_id
             AND cm.conflict_set_id = cs.conflict_set_id
             AND f.status = 'active'
       ) AS active_ids
FROM conflict_sets AS cs
WHERE cs.project_id = :project_id
  AND cs.conflict_set_id = :conflict_set_id
FOR UPDATE;

-- name: resolve_conflict_set(project_id, conflict_set_id, keep_ids)!
-- Resolves a set: members not kept become superseded (valid_to = now) and stop being believed
-- now (recorded_to, with the valid_to they had until then: migration 0012); the set becomes
-- resolved at the same instant.
WITH dropped AS (
    UPDATE facts AS f
    SET status = 'superseded',
        recorded_to = now(),
        believed_valid_to = f.valid_to,
        valid_to = CASE WHEN f.valid_from IS NOT NULL AND f.valid_from >= now()
                        THEN f.valid_to ELSE coalesce(least(f.valid_to, now()), now()) END
    FROM conflict_members AS cm
    WHERE cm.project_id = :project_id
      AND cm.conflict_set_id = :conflict_set_id
      AND f.project_id = cm.project_id
      AND f.fact_id = cm.fact_id
      AND f.status = 'active'
      AND NOT (f.fact_id = ANY(:keep_ids::uuid[]))
    RETURNING f.fact_id
)
UPDATE conflict_sets
SET status = 'resolved',
    resolved_at = now()
WHERE project_id = :project_id
  AND conflict_set_id = :conflict_set_id;

-- name: resolve_left_conflict_sets(project_id, fact_ids)
-- Resolves each open set holding one of these facts that is left with fewer than two claims
-- (haki_conflict_claims): a retracted or superseded member claims nothing any more, as an erased
-- one (erase_memory), and the claim left is served again. The caller holds the key's lock
-- (lock_fact_keys), so a concurrent change of another member is seen. Returns the sets resolved.
UPDATE conflict_sets AS cs
SET status = 'resolved',
    resolved_at = now()
WHERE cs.project_id = :project_id
  AND cs.status = 'open'
  AND EXISTS (
      SELECT 1
      FROM conflict_members AS m
      WHERE m.project_id = :project_id
        AND m.conflict_set_id = cs.conflict_set_id
        AND m.fact_id = ANY (:fact_ids::uuid[])
  )
  AND public.haki_conflict_claims(:project_id, cs.conflict_set_id, NULL::uuid) < 2
RETURNING cs.conflict_set_id;

-- name: restore_conflict_sets(project_id, subject_id, conflict_set_ids, keys, statuses, created_ats, resolved_ats)!
-- Recreates an export's conflict sets as exported (`haki import` of a haki_export 2 document):
-- key, status and times, which replaying the writes would guess (docs/lifecycle.md). A
-- resolved set without its time is resolved at the import.
INSERT INTO conflict_sets (project_id, conflict_set_id, subject_id, key, status, created_at, resolved_at)
SELECT :project_id, t.conflict_set_id, :subject_id, t.key, t.status, coalesce(t.created_at, now()),
       CASE WHEN t.status = 'resolved' THEN coalesce(t.resolved_at, now()) END
FROM unnest(
    :conflict_set_ids::uuid[], :keys::text[], :statuses::text[], :created_ats::timestamptz[],
    :resolved_ats::timestamptz[]
) AS t(conflict_set_id, key, status, created_at, resolved_at);

-- name: restore_conflict_members(project_id, conflict_set_ids, fact_ids)!
-- The members of the sets restore_conflict_sets recreated, one row per (set, fact) pair.
INSERT INTO conflict_members (project_id, conflict_set_id, fact_id)
SELECT :project_id, t.conflict_set_id, t.fact_id
FROM unnest(:conflict_set_ids::uuid[], :fact_ids::uuid[]) AS t(conflict_set_id, fact_id);
