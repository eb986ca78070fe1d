-- An event's vector in context as of an instant (docs/spec/context-profiles.md, rule 8;
-- docs/time-travel.md): each vector records when it was made, and a call as of an instant (a
-- replay, as_of) ranks an episode by its vector in context only if it was made by then, so that a
-- replay ranks as its call did whatever the worker made since. A call at the current instant
-- (at NULL) uses every vector made.
--
-- The vectors made before this migration count as made at it (the column's default when added,
-- stored once in the catalog: no table rewrite); the worker stamps the ones it makes from now on
-- (queries/events.sql, set_event_contexts). The stamp means nothing beside a NULL vector.
ALTER TABLE public.events ADD COLUMN context_made_at timestamptz DEFAULT now();
ALTER TABLE public.events ALTER COLUMN context_made_at DROP DEFAULT;

-- Rule 8's distance as of an instant: the closer of the event's own vector and its vector in
-- context, the latter only when it was made by `at` (always at the current instant, at NULL).
CREATE FUNCTION public.haki_episode_distance(
    embedding public.vector, context_embedding public.vector, context_made_at timestamptz,
    query public.vector, at timestamptz
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT least(embedding OPERATOR(public.<=>) query,
             CASE WHEN at IS NULL OR context_made_at OPERATOR(pg_catalog.<=) at
                  THEN context_embedding OPERATOR(public.<=>) query
             END)
$$;

-- haki_event_context_walk (migration 0035), its exact scan by the distance as of `at`.
CREATE OR REPLACE FUNCTION public.haki_event_context_walk(
    p_project_id text, p_subject_id text, query public.vector, top_k integer,
    exact_scan_min integer, at timestamptz
) RETURNS TABLE (event_id uuid)
LANGUAGE sql STABLE ROWS 64 PARALLEL RESTRICTED
SET search_path TO 'pg_catalog', 'public'
SET plan_cache_mode TO 'force_generic_plan'
SET enable_seqscan TO 'off'
SET enable_sort TO 'off'
AS $$
WITH exact_scan AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1
        FROM public.events AS w
        WHERE w.project_id = p_project_id
          AND w.subject_id = p_subject_id
        ORDER BY w.occurred_at
        OFFSET public.haki_exact_scan_limit('public.events'::regclass, top_k, exact_scan_min) - 1
    ) AS small
)
(SELECT d.event_id
 FROM (
     SELECT w.event_id,
            public.haki_episode_distance(w.embedding, w.context_embedding, w.context_made_at, query, at)
                AS distance
     FROM public.events AS w
     WHERE (SELECT x.small FROM exact_scan AS x)
       AND query IS NOT NULL
       AND w.project_id = p_project_id
       AND w.subject_id = p_subject_id
       AND public.haki_event_held(w.occurred_at, w.recorded_at, at)
     OFFSET 0  -- computed distances, sorted below: never the HNSW ordering
 ) AS d
 ORDER BY d.distance, d.event_id
 LIMIT top_k)
UNION ALL
SELECT g.event_id
FROM public.haki_event_graph_walk(p_project_id, p_subject_id, query, top_k, at) AS g
WHERE NOT (SELECT x.small FROM exact_scan AS x)
  AND query IS NOT NULL
$$;

-- The pool and its score (migration 0035), an episode's distance as of `at`.
CREATE OR REPLACE FUNCTION public.haki_unified_pool(
    p_project_id text, query_embedding public.vector, config regconfig, walked_facts uuid[],
    walked_events uuid[], matched_facts uuid[], matched_events uuid[], word_queries tsquery[],
    idfs double precision[], top_k integer, candidate_limit integer, w_similarity double precision,
    w_text_rank double precision, w_recency double precision, tau_seconds double precision,
    at timestamptz
) RETURNS TABLE (
    item_types text[], item_ids uuid[], contents text[], tokens integer[], valid_froms timestamptz[],
    valid_tos timestamptz[], recorded_froms timestamptz[], source_event_ids uuid[],
    occurred_ats timestamptz[], cosine_distances double precision[],
    similarities double precision[], text_ranks double precision[], recencies double precision[],
    scores double precision[]
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH words AS MATERIALIZED (
    SELECT w.word_query, w.idf
    FROM ROWS FROM (pg_catalog.unnest(word_queries), pg_catalog.unnest(idfs)) AS w(word_query, idf)
),
total AS MATERIALIZED (
    -- Any of the words as one tsquery: a text that holds none has text rank 0 without a test
    -- per word.
    SELECT nullif(pg_catalog.sum(w.idf), 0) AS idf,
           pg_catalog.string_agg('(' || w.word_query::text || ')', ' | ')::tsquery AS any_word
    FROM words AS w
),
pool AS (
    SELECT p.item_type, p.item_id, p.content, p.valid_from, p.valid_to, p.recorded_from,
           p.source_event_id, p.occurred_at, p.tokens, p.cosine_distance, p.recency, p.walked,
           p.hit,
           CASE WHEN p.sv OPERATOR(pg_catalog.@@) (SELECT t.any_word FROM total AS t)
                THEN coalesce((SELECT pg_catalog.sum(w.idf) FROM words AS w
                               WHERE p.sv OPERATOR(pg_catalog.@@) w.word_query)
                              OPERATOR(pg_catalog./) (SELECT t.idf FROM total AS t), 0)
                ELSE 0
           END AS text_rank
    FROM (
        SELECT 'fact' AS item_type, f.fact_id AS item_id, f.content, f.valid_from,
               public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, at) AS valid_to,
               f.recorded_from, f.source_event_id, NULL::timestamptz AS occurred_at,
               public.haki_tokens(f.content) AS tokens,
               (f.embedding OPERATOR(public.<=>) query_embedding) AS cosine_distance,
               public.haki_fact_recency(f.valid_from, f.recorded_from, tau_seconds, at) AS recency,
               public.haki_text_vector(config, f.search_vector, f.search_vector_english) AS sv,
               f.fact_id OPERATOR(pg_catalog.=) ANY (walked_facts) AS walked,
               f.fact_id OPERATOR(pg_catalog.=) ANY (matched_facts) AS hit
        FROM public.facts AS f
        WHERE f.project_id OPERATOR(pg_catalog.=) p_project_id
          AND f.fact_id OPERATOR(pg_catalog.=) ANY (walked_facts OPERATOR(pg_catalog.||) matched_facts)
        UNION ALL
        SELECT 'episode', e.event_id, e.content, NULL, NULL, NULL, NULL, e.occurred_at,
               public.haki_tokens(e.content),
               public.haki_episode_distance(e.embedding, e.context_embedding, e.context_made_at,
                                            query_embedding, at),
               public.haki_recency(e.occurred_at, tau_seconds, at),
               public.haki_text_vector(config, e.search_vector, e.search_vector_english),
               e.event_id OPERATOR(pg_catalog.=) ANY (walked_events),
               e.event_id OPERATOR(pg_catalog.=) ANY (matched_events)
        FROM public.events AS e
        WHERE e.project_id OPERATOR(pg_catalog.=) p_project_id
          AND e.event_id OPERATOR(pg_catalog.=) ANY (walked_events OPERATOR(pg_catalog.||) matched_events)
    ) AS p
),
kept AS (
    SELECT r.item_type, r.item_id, r.content, r.valid_from, r.valid_to, r.recorded_from,
           r.source_event_id, r.occurred_at, r.tokens, r.cosine_distance, r.text_rank, r.recency
    FROM (
        SELECT p.*, pg_catalog.row_number() OVER (PARTITION BY p.item_type, p.hit
                                                  ORDER BY p.text_rank DESC, p.item_id) AS text_pos
        FROM pool AS p
    ) AS r
    WHERE r.walked OR (r.hit AND r.text_pos OPERATOR(pg_catalog.<=) top_k)
),
scored AS (
    SELECT k.*, 1 OPERATOR(pg_catalog.-) k.cosine_distance AS similarity,
           public.haki_hybrid_score(k.cosine_distance, k.text_rank, k.recency, w_similarity,
                                    w_text_rank, w_recency) AS score
    FROM kept AS k
    ORDER BY score DESC, k.item_type OPERATOR(pg_catalog.=) 'episode', k.item_id
    LIMIT candidate_limit
),
ranked AS (
    SELECT s.*, pg_catalog.row_number() OVER (ORDER BY s.score DESC,
                                              s.item_type OPERATOR(pg_catalog.=) 'episode',
                                              s.item_id) AS pos
    FROM scored AS s
)
SELECT pg_catalog.array_agg(r.item_type ORDER BY r.pos), pg_catalog.array_agg(r.item_id ORDER BY r.pos),
       pg_catalog.array_agg(r.content ORDER BY r.pos), pg_catalog.array_agg(r.tokens ORDER BY r.pos),
       pg_catalog.array_agg(r.valid_from ORDER BY r.pos), pg_catalog.array_agg(r.valid_to ORDER BY r.pos),
       pg_catalog.array_agg(r.recorded_from ORDER BY r.pos),
       pg_catalog.array_agg(r.source_event_id ORDER BY r.pos),
       pg_catalog.array_agg(r.occurred_at ORDER BY r.pos),
       pg_catalog.array_agg(r.cosine_distance ORDER BY r.pos),
       pg_catalog.array_agg(r.similarity ORDER BY r.pos), pg_catalog.array_agg(r.text_rank ORDER BY r.pos),
       pg_catalog.array_agg(r.recency ORDER BY r.pos), pg_catalog.array_agg(r.score ORDER BY r.pos)
FROM ranked AS r
$$;

-- Every caller now passes the instant (the form without it is gone, not left to drift).
DROP FUNCTION public.haki_episode_distance(public.vector, public.vector, public.vector);
