-- name: insert_events(project_id, subject_id, event_ids, contents, occurred_ats, metadatas, embeddings)!
-- Writes a whole batch of events in one statement (arrays unnested in input order). An event
-- written before one already stored becomes that one's predecessor: the stored one's vector in
-- context goes, for the event context worker to make again (migration 0035). A pending one needs
-- nothing: the worker's store waits for the write (lock_event_order) and reads its predecessor then.
WITH successors AS (
    UPDATE events AS s
    SET context_embedding = NULL
    FROM (
        SELECT DISTINCT a.event_id
        FROM unnest(:occurred_ats::timestamptz[], :event_ids::uuid[]) AS t(occurred_at, event_id)
        CROSS JOIN LATERAL public.haki_event_after(:project_id, :subject_id, t.occurred_at,
                                                   t.event_id) AS a
    ) AS n
    WHERE s.project_id = :project_id
      AND s.event_id = n.event_id
      AND s.context_embedding IS NOT NULL
    RETURNING s.event_id
)
INSERT INTO events (project_id, event_id, subject_id, content, occurred_at, metadata, embedding)
SELECT :project_id, t.event_id, :subject_id, t.content, t.occurred_at,
       coalesce(t.metadata, '{}'::jsonb), t.embedding
FROM unnest(
    :event_ids::uuid[], :contents::text[], :occurred_ats::timestamptz[], :metadatas::jsonb[],
    :embeddings::vector[]
) AS t(event_id, content, occurred_at, metadata, embedding);

-- name: lock_event_order(project_id, subject_id)!
-- Serialises the event writes of one scope until the transaction ends, and the event context
-- worker's stores of its vectors with them (share_event_orders): a write then sees the events an
-- earlier one committed (insert_events sets back to pending the one after its own), and a store
-- runs before a write or after its commit, never reading predecessors while one is uncommitted.
-- Two writes of events into a scope, both between the same two stored ones, otherwise left the
-- later's vector made from the wrong event. The key is in the bigint space of lock_fact_keys,
-- under its own seed: a collision only shares a lock.
SELECT pg_advisory_xact_lock(
    hashtextextended(:subject_id, hashtextextended(:project_id, hashtextextended('event order', 0)))
);

-- name: share_event_orders(project_id, event_ids)!
-- lock_event_order's lock, shared, of every scope holding one of these events, for the event
-- context worker's store, in one order (of the lock key), as share_event_scopes.
SELECT pg_advisory_xact_lock_shared(k.lock_id)
FROM (
    SELECT DISTINCT
        hashtextextended(e.subject_id, hashtextextended(:project_id, hashtextextended('event order', 0)))
            AS lock_id
    FROM events AS e
    WHERE e.project_id = :project_id
      AND e.event_id = ANY (:event_ids::uuid[])
    ORDER BY lock_id
) AS k;

-- name: missing_events(project_id, subject_id, event_ids)
-- The ids among event_ids that are not events of this scope (for source_event_id checks).
SELECT t.event_id
FROM unnest(:event_ids::uuid[]) AS t(event_id)
WHERE NOT EXISTS (
    SELECT 1
    FROM events AS e
    WHERE e.project_id = :project_id
      AND e.subject_id = :subject_id
      AND e.event_id = t.event_id
);

-- name: next_event_context_project(after_project)$
-- The event context worker's round (service/memory/event_context.py): the first project after
-- after_project (null: the first) with an event whose vector in context is still to be made, read
-- from the partial index of those events. Global by design, as the retention's project list.
SELECT e.project_id
FROM events AS e
WHERE e.context_embedding IS NULL
  AND (:after_project::text IS NULL OR e.project_id > :after_project::text)
ORDER BY e.project_id
LIMIT 1;

-- name: claim_event_contexts(project_id, event_ids, batch_size, lease_seconds)
-- Claims the project's next events without a vector in context (of the given ids only, when
-- given: a write's own) for lease_seconds, each with the event before it in its scope
-- (haki_event_before; null for a scope's first event), in id order. An event another process
-- claimed is left to it, so that each is embedded once: one being claimed is skipped by its row
-- lock, one claimed by the claims table, and two claims read before either committed meet on
-- its key, where only the first is returned.
WITH picked AS (
    SELECT e.event_id AS event_id, e.content AS content, e.subject_id AS subject_id,
           e.occurred_at AS occurred_at
    FROM events AS e
    WHERE e.project_id = :project_id
      AND e.context_embedding IS NULL
      AND (:event_ids::uuid[] IS NULL OR e.event_id = ANY (:event_ids::uuid[]))
      AND NOT EXISTS (
          SELECT 1
          FROM event_context_claims AS c
          WHERE c.project_id = :project_id
            AND c.event_id = e.event_id
            AND c.claimed_until > clock_timestamp()
      )
    ORDER BY e.event_id
    LIMIT :batch_size
    FOR NO KEY UPDATE OF e SKIP LOCKED
),
claimed AS (
    INSERT INTO event_context_claims AS c (project_id, event_id, claimed_until)
    SELECT :project_id, p.event_id, clock_timestamp() + make_interval(secs => :lease_seconds::float8)
    FROM picked AS p
    ON CONFLICT (project_id, event_id) DO UPDATE
    SET claimed_until = excluded.claimed_until
    WHERE c.claimed_until <= clock_timestamp()
    RETURNING c.event_id AS event_id
)
SELECT p.event_id AS event_id, p.content AS content, b.event_id AS before_id,
       b.content AS before_content
FROM picked AS p
JOIN claimed AS k ON k.event_id = p.event_id
LEFT JOIN LATERAL public.haki_event_before(:project_id, p.subject_id, p.occurred_at,
                                           p.event_id) AS b ON true
ORDER BY p.event_id;

-- name: release_event_context_claims(project_id, event_ids)!
-- Ends the claims on a batch (stored, or its embedding failed), and the project's claims whose
-- lease ran out (a process that died mid-batch), so the table holds only claims in progress.
DELETE FROM event_context_claims AS c
WHERE c.project_id = :project_id
  AND (c.event_id = ANY (:event_ids::uuid[]) OR c.claimed_until <= clock_timestamp());

-- name: set_event_contexts(project_id, event_ids, before_ids, embeddings)$
-- Stores one batch of vectors in context; a null vector (a scope's first event) takes the event's
-- own. An event is skipped when it is gone, already has one, or its predecessor is no longer the
-- one its vector was made from (an event written or erased between them since): the worker reads
-- it again. Each is stamped with the clock, not the transaction's start: a call as of an earlier
-- instant (a replay) does not rank by it (migration 0036). Returns how many were stored.
WITH stored AS (
    UPDATE events AS e
    SET context_embedding = coalesce(t.embedding, e.embedding),
        context_made_at = clock_timestamp()
    FROM unnest(:event_ids::uuid[], :before_ids::uuid[], :embeddings::vector[])
        AS t(event_id, before_id, embedding)
    WHERE e.project_id = :project_id
      AND e.event_id = t.event_id
      AND e.context_embedding IS NULL
      AND t.before_id IS NOT DISTINCT FROM (
          SELECT b.event_id
          FROM public.haki_event_before(e.project_id, e.subject_id, e.occurred_at, e.event_id) AS b
      )
    RETURNING e.event_id
)
SELECT count(*) AS stored FROM stored;
