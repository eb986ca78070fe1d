-- name: supersede_facts(project_id, subject_id, old_ids, new_valid_froms)
-- Marks the facts named by `supersedes` as superseded (locking them); returns those it changed.
-- A fact is only superseded when it is active in this scope and starts before its successor.
-- It stops being believed now (recorded_to, migration 0012), with the valid_to it had until then.
-- It ends where its successor starts, or earlier if it had already ended: a supersession never
-- makes a fact true for longer than it was said to be (as a conflict's resolution, conflicts.sql).
UPDATE facts AS f
SET status = 'superseded',
    valid_to = least(f.valid_to, s.ends_at),
    recorded_to = now(),
    believed_valid_to = f.valid_to
FROM (
    SELECT t.old_id, min(coalesce(t.new_valid_from, now())) AS ends_at
    FROM unnest(:old_ids::uuid[], :new_valid_froms::timestamptz[]) AS t(old_id, new_valid_from)
    GROUP BY t.old_id
) AS s
WHERE f.project_id = :project_id
  AND f.subject_id = :subject_id
  AND f.fact_id = s.old_id
  AND f.status = 'active'
  AND (f.valid_from IS NULL OR f.valid_from < s.ends_at)
RETURNING f.fact_id;

-- name: insert_facts(project_id, subject_id, fact_ids, contents, keys, valid_froms, valid_tos, volatilities, stale_after_seconds, supersedes, source_event_ids, metadatas, embeddings)!
-- Writes a whole batch of facts in one statement (arrays unnested in input order).
INSERT INTO facts (
    project_id, fact_id, subject_id, content, key, valid_from, valid_to, volatility,
    stale_after, supersedes, source_event_id, metadata, embedding
)
SELECT :project_id, t.fact_id, :subject_id, t.content, t.key, t.valid_from, t.valid_to, t.volatility,
       make_interval(secs => t.stale_after_seconds), t.supersedes, t.source_event_id,
       coalesce(t.metadata, '{}'::jsonb), t.embedding
FROM unnest(
    :fact_ids::uuid[], :contents::text[], :keys::text[], :valid_froms::timestamptz[],
    :valid_tos::timestamptz[], :volatilities::text[], :stale_after_seconds::float8[],
    :supersedes::uuid[], :source_event_ids::uuid[], :metadatas::jsonb[], :embeddings::vector[]
) AS t(fact_id, content, key, valid_from, valid_to, volatility, stale_after_seconds,
       supersedes, source_event_id, metadata, embedding);

-- name: restore_facts(project_id, subject_id, fact_ids, contents, keys, statuses, valid_froms, valid_tos, believed_valid_tos, volatilities, stale_after_seconds, supersedes, source_event_ids, metadatas, embeddings)!
-- Writes a batch of an export's facts with the statuses they were exported with (`haki import` of
-- a haki_export 2 document), never through supersession or conflict detection, which would
-- guess them again. recorded_from is the import's, so a fact no longer active stops being
-- believed at the import too; valid_to and believed_valid_to are the exported ones.
INSERT INTO facts (
    project_id, fact_id, subject_id, content, key, status, valid_from, valid_to, believed_valid_to,
    recorded_to, volatility, stale_after, supersedes, source_event_id, metadata, embedding
)
SELECT :project_id, t.fact_id, :subject_id, t.content, t.key, t.status, t.valid_from, t.valid_to,
       CASE WHEN t.status = 'active' THEN NULL ELSE t.believed_valid_to END,
       CASE WHEN t.status = 'active' THEN NULL ELSE now() END,
       t.volatility, make_interval(secs => t.stale_after_seconds), t.supersedes, t.source_event_id,
       coalesce(t.metadata, '{}'::jsonb), t.embedding
FROM unnest(
    :fact_ids::uuid[], :contents::text[], :keys::text[], :statuses::text[], :valid_froms::timestamptz[],
    :valid_tos::timestamptz[], :believed_valid_tos::timestamptz[], :volatilities::text[],
    :stale_after_seconds::float8[], :supersedes::uuid[], :source_event_ids::uuid[], :metadatas::jsonb[],
    :embeddings::vector[]
) AS t(fact_id, content, key, status, valid_from, valid_to, believed_valid_to, volatility,
       stale_after_seconds, supersedes, source_event_id, metadata, embedding);

-- name: detect_conflicts(project_id, subject_id, fact_ids)
-- Opens (or joins) one ConflictSet per key where a new fact disagrees with another active fact
-- of the same key and scope; returns each new fact that landed in a set, with the set id.
-- A successor is checked too: the fact it supersedes is no longer active, so never its rival.
-- Each key's active facts are read once, never paired with each new fact (that was quadratic).
WITH new_facts AS (
    SELECT f.fact_id, f.key, f.content
    FROM facts AS f
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.fact_id = ANY(:fact_ids::uuid[])
      AND f.key IS NOT NULL
      AND f.status = 'active'
),
new_keys AS (
    -- The one content a key's new facts share, NULL when they say several things.
    SELECT n.key,
           CASE WHEN min(n.content) = max(n.content) THEN min(n.content) END AS only_content
    FROM new_facts AS n
    GROUP BY n.key
),
key_facts AS MATERIALIZED (
    -- The active facts of the new facts' keys, the new ones among them.
    SELECT k.key, k.only_content, o.fact_id, o.content
    FROM new_keys AS k
    JOIN facts AS o
      ON o.project_id = :project_id
     AND o.subject_id = :subject_id
     AND o.key = k.key
     AND o.status = 'active'
),
clashing_keys AS (
    -- A key clashes when its active facts say more than one thing.
    SELECT o.key, o.only_content
    FROM key_facts AS o
    GROUP BY o.key, o.only_content
    HAVING min(o.content) <> max(o.content)
),
clashes AS (
    -- Every new fact of a clashing key, and each of its active facts that some new fact
    -- contradicts: all of them, unless the new facts share the content it has.
    SELECT n.key, n.fact_id
    FROM new_facts AS n
    JOIN clashing_keys AS k USING (key)
    UNION
    SELECT o.key, o.fact_id
    FROM key_facts AS o
    JOIN clashing_keys AS k USING (key)
    WHERE k.only_content IS NULL OR o.content <> k.only_content
),
opened AS (
    INSERT INTO conflict_sets (project_id, conflict_set_id, subject_id, key)
    SELECT :project_id, gen_random_uuid(), :subject_id, k.key
    FROM clashing_keys AS k
    ON CONFLICT (project_id, subject_id, key) WHERE status = 'open'
    DO UPDATE SET key = EXCLUDED.key
    RETURNING conflict_set_id, key
),
joined AS (
    INSERT INTO conflict_members (project_id, conflict_set_id, fact_id)
    SELECT :project_id, o.conflict_set_id, c.fact_id
    FROM clashes AS c
    JOIN opened AS o USING (key)
    ON CONFLICT DO NOTHING
)
SELECT n.fact_id, o.conflict_set_id
FROM new_facts AS n
JOIN opened AS o USING (key);

-- name: get_fact(project_id, fact_id)^
-- One fact of a project, with the open ConflictSet it sits in, if any, and what it is worth
-- (haki_fact_rows, migration 0015).
SELECT r.fact_id, r.project_id, r.subject_id, r.content, r.key, r.status, r.valid_from, r.valid_to,
       r.recorded_from, r.volatility, r.stale_after_seconds, r.supersedes, r.source_event_id,
       r.metadata, r.conflict_set_id, r.recorded_to, r.served_count, r.last_served_at, r.excluded_count
FROM public.haki_fact_rows(:project_id) AS r
WHERE r.project_id = :project_id
  AND r.fact_id = :fact_id;

-- name: list_facts(project_id, subject_id, status, after_id, page_size)
-- One page of a project's facts in id (= creation) order, after the cursor; optional filters;
-- with what each is worth (haki_fact_rows, migration 0015).
SELECT r.fact_id, r.project_id, r.subject_id, r.content, r.key, r.status, r.valid_from, r.valid_to,
       r.recorded_from, r.volatility, r.stale_after_seconds, r.supersedes, r.source_event_id,
       r.metadata, r.conflict_set_id, r.recorded_to, r.served_count, r.last_served_at, r.excluded_count
FROM public.haki_fact_rows(:project_id) AS r
WHERE r.project_id = :project_id
  AND (:subject_id::text IS NULL OR r.subject_id = :subject_id)
  AND (:status::text IS NULL OR r.status = :status)
  AND (:after_id::uuid IS NULL OR r.fact_id > :after_id)
ORDER BY r.fact_id
LIMIT :page_size;

-- name: list_successors(project_id, subject_id, fact_id)
-- The facts of one scope that name fact_id in `supersedes` (what replaced it), in id order, with
-- what each is worth (haki_fact_rows): read from the scope's facts, whatever their number.
SELECT r.fact_id, r.project_id, r.subject_id, r.content, r.key, r.status, r.valid_from, r.valid_to,
       r.recorded_from, r.volatility, r.stale_after_seconds, r.supersedes, r.source_event_id,
       r.metadata, r.conflict_set_id, r.recorded_to, r.served_count, r.last_served_at, r.excluded_count
FROM public.haki_fact_rows(:project_id) AS r
WHERE r.project_id = :project_id
  AND r.subject_id = :subject_id
  AND r.supersedes = :fact_id
ORDER BY r.fact_id;

-- name: patch_fact(project_id, fact_id, retract, valid_to)$
-- Retracts a fact and/or sets its valid_to; returns the fact id, or NULL when there is none or
-- it is not active (the caller tells which): a superseded or retracted fact's history is kept as
-- it was, except that retracting a retracted fact again changes nothing and succeeds.
-- A retraction of a believed fact ends its belief now (recorded_to, migration 0012), with the
-- valid_to it had until then: the one this patch gives, if any (as a valid_to patched first and a
-- retraction after: the correction is not versioned); a fact no longer believed keeps both.
UPDATE facts
SET status = CASE WHEN :retract::boolean THEN 'retracted' ELSE status END,
    valid_to = coalesce(:valid_to::timestamptz, valid_to),
    recorded_to = CASE WHEN :retract::boolean THEN coalesce(recorded_to, now()) ELSE recorded_to END,
    believed_valid_to = CASE WHEN :retract::boolean AND recorded_to IS NULL
                             THEN coalesce(:valid_to::timestamptz, valid_to) ELSE believed_valid_to END
WHERE project_id = :project_id
  AND fact_id = :fact_id
  AND (status = 'active' OR (status = 'retracted' AND :retract::boolean AND :valid_to::timestamptz IS NULL))
RETURNING fact_id;

-- name: fact_keys(project_id, subject_id, fact_ids)
-- The keys of these facts of one scope, those that have one: a write that supersedes or retracts
-- a fact takes its key's lock too (lock_fact_keys), as a conflict set holding it may resolve.
SELECT DISTINCT f.key AS key
FROM facts AS f
WHERE f.project_id = :project_id
  AND f.subject_id = :subject_id
  AND f.fact_id = ANY (:fact_ids::uuid[])
  AND f.key IS NOT NULL;

-- name: lock_fact_keys(project_id, subject_id, keys)!
-- Serialises conflict detection per (project, subject, key) until the transaction ends.
-- A write of a key waits here for a concurrent write of the same key to commit, so its
-- detect_conflicts sees that write's facts (without it two racing writes both stayed active,
-- docs/reliability.md). Locks are taken in lock-id order, whatever the batch's order, so two
-- batches sharing keys wait instead of deadlocking; other keys never wait. A hash collision only
-- makes two keys share a lock.
SELECT pg_advisory_xact_lock(k.lock_id)
FROM (
    SELECT DISTINCT hashtextextended(t.key, hashtextextended(:subject_id, hashtextextended(:project_id, 0)))
        AS lock_id
    FROM unnest(:keys::text[]) AS t(key)
    WHERE t.key IS NOT NULL
    ORDER BY lock_id
) AS k;
