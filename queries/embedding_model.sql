-- name: hold_embedding_model(project_id, model)$
-- The project's embedding model for a write, recorded with its first write, and a share lock on
-- its row until the write's transaction ends: a re-embedding's switch (switch_embedding_model)
-- waits for writes in flight, and a write that waited on the switch reads the new model.
-- NULL only when another write recorded the model after this statement's snapshot: run it again.
WITH claimed AS (
    INSERT INTO project_embedding_models (project_id, model)
    VALUES (:project_id, :model)
    ON CONFLICT (project_id) DO NOTHING
    RETURNING model
)
SELECT coalesce(
    (SELECT c.model FROM claimed AS c),
    (SELECT m.model FROM project_embedding_models AS m WHERE m.project_id = :project_id FOR SHARE)
) AS model;

-- name: share_embedding_model(project_id)!
-- A share lock on the project's model record until the transaction ends, for a change that embeds
-- nothing but deletes or rewrites rows that a re-embedding's swap rewrites (an erasure, a conflict
-- resolution): the switch waits for it, so the swap meets every row it counted. Taken after the
-- scope's erasure lock, as writes take hold_embedding_model; NOWAIT: during a switch it fails at
-- once (a retryable 503) rather than hold the scope's lock, and every call of the scope, meanwhile.
SELECT m.project_id
FROM project_embedding_models AS m
WHERE m.project_id = :project_id
FOR SHARE NOWAIT;

-- name: get_embedding_model(project_id)$
-- The model a project's vectors were made with; NULL before its first write.
SELECT m.model AS model
FROM project_embedding_models AS m
WHERE m.project_id = :project_id;

-- name: list_projects_on_other_models(model)
-- haki doctor: the projects whose vectors another model made than the configured one, which a
-- server on it refuses; every project (an operator's check on demand), project ids only.
SELECT m.project_id
FROM project_embedding_models AS m
WHERE m.model <> :model
ORDER BY m.project_id;

-- name: switch_embedding_model(project_id, model)$
-- Records the project's new model and locks its row until the switch commits: writes of the
-- project wait (hold_embedding_model), then read the new model.
INSERT INTO project_embedding_models (project_id, model)
VALUES (:project_id, :model)
ON CONFLICT (project_id) DO UPDATE SET model = excluded.model, recorded_at = now()
RETURNING model AS model;

-- name: count_reembed_pending(project_id, model)^
-- How many facts and events of the project there are, and how many have a vector of the model
-- waiting beside the served one.
SELECT (SELECT count(*) FROM facts AS f WHERE f.project_id = :project_id) AS facts,
       (SELECT count(*) FROM events AS e WHERE e.project_id = :project_id) AS events,
       (SELECT count(*) FROM reembedded_facts AS rf
        WHERE rf.project_id = :project_id AND rf.model = :model) AS facts_done,
       (SELECT count(*) FROM reembedded_events AS re
        WHERE re.project_id = :project_id AND re.model = :model) AS events_done;

-- name: pending_fact_texts(project_id, model, after_id, batch_size)
-- The next facts (in id order, after after_id) without a vector of the model beside them.
SELECT f.fact_id AS item_id, f.content AS content
FROM facts AS f
WHERE f.project_id = :project_id
  AND (:after_id::uuid IS NULL OR f.fact_id > :after_id::uuid)
  AND NOT EXISTS (
      SELECT 1 FROM reembedded_facts AS r
      WHERE r.project_id = f.project_id AND r.fact_id = f.fact_id AND r.model = :model
  )
ORDER BY f.fact_id
LIMIT :batch_size;

-- name: pending_event_texts(project_id, model, after_id, batch_size)
-- The next events (in id order, after after_id) without a vector of the model beside them.
SELECT e.event_id AS item_id, e.content AS content
FROM events AS e
WHERE e.project_id = :project_id
  AND (:after_id::uuid IS NULL OR e.event_id > :after_id::uuid)
  AND NOT EXISTS (
      SELECT 1 FROM reembedded_events AS r
      WHERE r.project_id = e.project_id AND r.event_id = e.event_id AND r.model = :model
  )
ORDER BY e.event_id
LIMIT :batch_size;

-- name: insert_reembedded_facts(project_id, model, fact_ids, embeddings)!
-- One batch of the new model's fact vectors, beside the served ones (a leftover of another model
-- is overwritten). Facts erased since they were read are skipped, those an erasure is deleting
-- too: the facts are locked (key share) before the insert, which waits for the erasure and then
-- skips them (its foreign key check failed on them).
INSERT INTO reembedded_facts (project_id, fact_id, model, embedding)
SELECT :project_id, t.fact_id, :model, t.embedding
FROM unnest(:fact_ids::uuid[], :embeddings::vector[]) AS t(fact_id, embedding)
JOIN facts AS f ON f.project_id = :project_id AND f.fact_id = t.fact_id
FOR KEY SHARE OF f
ON CONFLICT (project_id, fact_id) DO UPDATE SET model = excluded.model, embedding = excluded.embedding;

-- name: insert_reembedded_events(project_id, model, event_ids, embeddings)!
-- One batch of the new model's event vectors, beside the served ones (see insert_reembedded_facts).
INSERT INTO reembedded_events (project_id, event_id, model, embedding)
SELECT :project_id, t.event_id, :model, t.embedding
FROM unnest(:event_ids::uuid[], :embeddings::vector[]) AS t(event_id, embedding)
JOIN events AS e ON e.project_id = :project_id AND e.event_id = t.event_id
FOR KEY SHARE OF e
ON CONFLICT (project_id, event_id) DO UPDATE SET model = excluded.model, embedding = excluded.embedding;

-- name: swap_reembedded_vectors(project_id, model)^
-- The switch's one statement: every fact and event of the project takes its vector of the model,
-- and the pending vectors are deleted. The counts let the caller refuse a partial swap.
WITH swapped_facts AS (
    UPDATE facts AS f SET embedding = r.embedding
    FROM reembedded_facts AS r
    WHERE f.project_id = :project_id AND r.project_id = :project_id
      AND r.fact_id = f.fact_id AND r.model = :model
    RETURNING f.fact_id
),
swapped_events AS (
    -- Vectors in context are the old model's too: the event context worker makes them again.
    UPDATE events AS e SET embedding = r.embedding, context_embedding = NULL
    FROM reembedded_events AS r
    WHERE e.project_id = :project_id AND r.project_id = :project_id
      AND r.event_id = e.event_id AND r.model = :model
    RETURNING e.event_id
),
cleared_facts AS (
    DELETE FROM reembedded_facts AS rf WHERE rf.project_id = :project_id RETURNING rf.fact_id
),
cleared_events AS (
    DELETE FROM reembedded_events AS re WHERE re.project_id = :project_id RETURNING re.event_id
)
SELECT (SELECT count(*) FROM facts AS f WHERE f.project_id = :project_id) AS facts,
       (SELECT count(*) FROM swapped_facts) AS facts_swapped,
       (SELECT count(*) FROM events AS e WHERE e.project_id = :project_id) AS events,
       (SELECT count(*) FROM swapped_events) AS events_swapped,
       (SELECT count(*) FROM cleared_facts) + (SELECT count(*) FROM cleared_events) AS cleared;
