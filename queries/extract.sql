-- name: list_extract_known_facts(project_id, subject_id, max_facts)
-- The active facts of one scope shown to the extraction model (POST /v1/extract): keyed facts
-- first (they are the slots a new fact may conflict with or replace), then the newest; valid_from
-- tells which of them a proposal may supersede (a successor starts when it is written), `stale`
-- which are volatile facts no longer served (haki_fact_stale), which a restatement renews
-- (keeping their stale_after_seconds).
-- Two bounded reads, each newest first, then merged: one sort over the whole scope took 68-71 ms
-- on a 100k-fact scope (1 % keyed), these 3.5-6.2 ms (benchmarks/extract_known_facts.py).
SELECT k.fact_id, k.key, k.content, k.volatility, k.valid_from,
       public.haki_fact_stale(k.volatility, k.valid_from, k.recorded_from, k.stale_after, NULL) AS stale,
       extract(epoch FROM k.stale_after)::bigint AS stale_after_seconds
FROM (
    (SELECT f.fact_id, f.key, f.content, f.volatility, f.valid_from, f.recorded_from, f.stale_after
     FROM facts AS f
     WHERE f.project_id = :project_id
       AND f.subject_id = :subject_id
       AND f.status = 'active'
       AND f.key IS NOT NULL
     ORDER BY f.fact_id DESC
     LIMIT :max_facts)
    UNION ALL
    (SELECT f.fact_id, f.key, f.content, f.volatility, f.valid_from, f.recorded_from, f.stale_after
     FROM facts AS f
     WHERE f.project_id = :project_id
       AND f.subject_id = :subject_id
       AND f.status = 'active'
       AND f.key IS NULL
     ORDER BY f.fact_id DESC
     LIMIT :max_facts)
) AS k
ORDER BY (k.key IS NULL), k.fact_id DESC
LIMIT :max_facts;

-- name: list_extract_active_contents(project_id, subject_id, contents)
-- Which of the proposed texts an active fact of the scope holds word for word: the extraction's
-- `duplicate` beyond the facts shown to the model, unless every fact holding it is stale
-- (haki_fact_stale): then `renews` is the newest of them, which the restatement supersedes,
-- and `renews_stale_after_seconds` its window, which the restatement keeps. No
-- index holds content, so it reads the scope's facts: 93-112 ms for a 100k-fact scope
-- (2026-12-06, 2 cores shared with a CI run); the same match ignoring case and spacing,
-- lower(regexp_replace(...)) on every row, took 650-940 ms.
SELECT g.content,
       CASE WHEN g.all_stale THEN g.newest_id END AS renews,
       CASE WHEN g.all_stale THEN g.newest_stale_after_seconds END AS renews_stale_after_seconds
FROM (
    SELECT f.content,
           bool_and(public.haki_fact_stale(f.volatility, f.valid_from, f.recorded_from,
                                           f.stale_after, NULL)) AS all_stale,
           (array_agg(f.fact_id ORDER BY f.fact_id DESC))[1] AS newest_id,
           (array_agg(extract(epoch FROM f.stale_after)::bigint ORDER BY f.fact_id DESC))[1]
               AS newest_stale_after_seconds
    FROM facts AS f
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.status = 'active'
      AND f.content = ANY(:contents::text[])
    GROUP BY f.content
) AS g;

-- name: count_extract_erased_known(project_id, subject_id, fact_ids)$
-- How many of the facts shown to the model (list_extract_known_facts) are gone since: erased
-- while the model answered. An extraction whose model read an erased fact writes and answers
-- nothing, as its proposals and refusals may restate it; read under the scope's erasure lock.
SELECT cardinality(:fact_ids::uuid[]) - count(*) AS erased
FROM facts AS f
WHERE f.project_id = :project_id
  AND f.subject_id = :subject_id
  AND f.fact_id = ANY (:fact_ids::uuid[]);

-- name: lock_extraction_scope(project_id, subject_id)!
-- Serialises the writes of extractions into one scope (project, subject) until the transaction
-- ends, so that an extraction sees what a concurrent one wrote before it checks its proposals
-- again (list_extract_active_contents): without it both wrote the same fact. Taken after the
-- scope's erasure lock (share_erasure_scope), before any other lock of the write; direct writes,
-- erasures and context calls never wait here. The key is in the bigint space of lock_fact_keys,
-- under its own seed: a collision only shares a lock.
SELECT pg_advisory_xact_lock(
    hashtextextended(:subject_id, hashtextextended(:project_id, hashtextextended('extraction', 0)))
);
