-- Stand-ins (docs/spec/context-profiles.md, `unified` rule 7): an episode the pack is about to
-- serve is served through a cheaper servable fact of its own turn (the fact's source_event_id is
-- the episode's event), at the episode's rank.
--
-- The lookup (haki_unified_stand_ins, below, inside unified_candidates' round trip) reads, for the
-- episode candidates of one call, the facts whose source_event_id is one of their events: a
-- btree on (project_id, source_event_id), partial since the facts of many projects name no event.
CREATE INDEX facts_source_event ON public.facts (project_id, source_event_id)
    WHERE source_event_id IS NOT NULL;

-- Two decisions join the trace's codes (migration 0026): the fact served as a stand-in, and the
-- episode it stood in for. Existing codes keep their numbers.
CREATE OR REPLACE FUNCTION public.haki_trace_codes()
RETURNS TABLE (code smallint, item_type text, decision text, reason_code text, part smallint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT v.code::smallint, v.item_type, v.decision, v.reason_code,
       (CASE WHEN v.item_type <> 'fact' THEN 4
             WHEN v.decision = 'included' THEN 1
             WHEN v.reason_code = 'over_budget' THEN 2
             WHEN v.reason_code = 'below_relevance_floor' THEN 3
             ELSE 4
        END)::smallint
FROM (VALUES
    (1, 'fact', 'included', 'packed'),
    (2, 'fact', 'included', 'multi_hop_expansion'),
    (3, 'fact', 'excluded', 'over_budget'),
    (4, 'fact', 'excluded', 'below_relevance_floor'),
    (5, 'fact', 'excluded', 'already_served'),
    (6, 'fact', 'blocked', 'conflict_open'),
    (7, 'fact', 'blocked', 'volatility_expired'),
    (8, 'fact', 'included', 'stand_in'),
    (11, 'episode', 'included', 'packed'),
    (12, 'episode', 'included', 'multi_hop_expansion'),
    (13, 'episode', 'excluded', 'over_budget'),
    (14, 'episode', 'excluded', 'below_relevance_floor'),
    (15, 'episode', 'excluded', 'already_served'),
    (16, 'episode', 'excluded', 'replaced_by_stand_in')
) AS v(code, item_type, decision, reason_code)
$$;

-- The stand-ins of a unified pool's episodes (docs/spec/context-profiles.md, rule 7), read in
-- the candidates' own round trip: for each episode among item_types/item_ids, the servable fact
-- whose source_event_id is its event with the fewest tokens (ties: closest to the query, then id),
-- none of open_members (the call's open-conflict facts), with the score parts of the pool's
-- formula (the idf share of word_queries, as haki_unified_pool computes it). One row of parallel
-- arrays keyed by event_ids (null when no episode has one).
CREATE FUNCTION public.haki_unified_stand_ins(
    p_project_id text, p_subject_id text, item_types text[], item_ids uuid[],
    query_embedding public.vector, config regconfig, word_queries tsquery[],
    idfs double precision[], open_members uuid[], w_similarity double precision,
    w_text_rank double precision, w_recency double precision, tau_seconds double precision,
    at timestamptz
) RETURNS TABLE (
    event_ids uuid[], fact_ids uuid[], contents text[], tokens integer[], valid_froms timestamptz[],
    valid_tos timestamptz[], recorded_froms timestamptz[], cosine_distances double precision[],
    similarities double precision[], text_ranks double precision[], recencies double precision[],
    scores double precision[]
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH episodes AS MATERIALIZED (
    SELECT pg_catalog.array_agg(u.item_id) AS event_ids
    FROM ROWS FROM (pg_catalog.unnest(item_types), pg_catalog.unnest(item_ids)) AS u(item_type, item_id)
    WHERE u.item_type OPERATOR(pg_catalog.=) 'episode'
),
words AS MATERIALIZED (
    SELECT w.word_query, w.idf
    FROM ROWS FROM (pg_catalog.unnest(word_queries), pg_catalog.unnest(idfs)) AS w(word_query, idf)
),
cheapest AS (
    SELECT DISTINCT ON (f.source_event_id)
           f.source_event_id, f.fact_id, f.content, f.valid_from,
           public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, at) AS valid_to,
           f.recorded_from, public.haki_tokens(f.content) AS tokens,
           (f.embedding OPERATOR(public.<=>) query_embedding) AS cosine_distance,
           public.haki_text_vector(config, f.search_vector, f.search_vector_english) AS sv,
           public.haki_fact_recency(f.valid_from, f.recorded_from, tau_seconds, at) AS recency
    FROM public.facts AS f
    -- facts_source_event: one probe per episode.
    WHERE f.project_id OPERATOR(pg_catalog.=) p_project_id
      AND f.source_event_id OPERATOR(pg_catalog.=) ANY ((SELECT e.event_ids FROM episodes AS e)::uuid[])
      AND f.subject_id OPERATOR(pg_catalog.=) p_subject_id
      AND public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from, f.recorded_from,
                                    f.stale_after, f.recorded_to, f.believed_valid_to, at)
      AND NOT (f.fact_id OPERATOR(pg_catalog.=) ANY (open_members))
    ORDER BY f.source_event_id, tokens, cosine_distance, f.fact_id
),
scored AS (
    SELECT c.source_event_id, c.fact_id, c.content, c.valid_from, c.valid_to, c.recorded_from,
           c.tokens, c.cosine_distance, c.recency,
           coalesce((SELECT pg_catalog.sum(w.idf) FROM words AS w
                     WHERE c.sv OPERATOR(pg_catalog.@@) w.word_query)
                    OPERATOR(pg_catalog./) (SELECT NULLIF(pg_catalog.sum(w.idf), 0) FROM words AS w),
                    0) AS text_rank
    FROM cheapest AS c
)
SELECT pg_catalog.array_agg(s.source_event_id), pg_catalog.array_agg(s.fact_id),
       pg_catalog.array_agg(s.content), pg_catalog.array_agg(s.tokens),
       pg_catalog.array_agg(s.valid_from), pg_catalog.array_agg(s.valid_to),
       pg_catalog.array_agg(s.recorded_from), pg_catalog.array_agg(s.cosine_distance),
       pg_catalog.array_agg(1 OPERATOR(pg_catalog.-) s.cosine_distance),
       pg_catalog.array_agg(s.text_rank), pg_catalog.array_agg(s.recency),
       pg_catalog.array_agg(public.haki_hybrid_score(s.cosine_distance, s.text_rank, s.recency,
                                                     w_similarity, w_text_rank, w_recency))
FROM scored AS s
$$;
