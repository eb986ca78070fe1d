-- The `unified` profile's candidate statement (queries/context.sql, unified_candidates) as four
-- named pieces (docs/spec/context-profiles.md, rules 1 to 4): the idf sample, the vector side,
-- the text side, and the pool with its score. Each is inlinable (LANGUAGE sql, one SELECT, not
-- STRICT, no SET, STABLE), so the statement plans as one query; the pieces pass ids and the
-- query's words as arrays, which a generic plan looks up by primary key (a set joined to a table
-- under a generic plan may hash a scan of the whole table).

-- The idf sample: the query's words (haki_query_words, in `config`), each with its BM25 idf and
-- its share of the scope's sample of newest texts (haki_query_df), as one row of parallel arrays
-- in the words' order; `docs` is the sample's size. No words: null arrays.
CREATE FUNCTION public.haki_query_idf(
    p_project_id text, p_subject_id text, query text, config regconfig, max_words integer,
    sample_docs integer, at timestamptz
) RETURNS TABLE (
    words text[], word_queries tsquery[], idfs double precision[], shares double precision[],
    docs bigint
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT pg_catalog.array_agg(d.word), pg_catalog.array_agg(d.word_query),
       pg_catalog.array_agg(public.haki_bm25_idf(d.docs, d.df)),
       pg_catalog.array_agg(d.df::double precision OPERATOR(pg_catalog./) nullif(d.docs, 0)),
       pg_catalog.max(d.docs)
FROM public.haki_query_df(p_project_id, p_subject_id, query, config, max_words, sample_docs, at) AS d
$$;

-- The vector side: the ids of the top_k closest servable facts (haki_fact_walk, past the open
-- conflicts' members) and of the event_top_k closest events held (haki_event_walk; none for
-- event_top_k 0) of the scope. A null query vector walks nothing.
CREATE FUNCTION public.haki_unified_walks(
    p_project_id text, p_subject_id text, query_embedding public.vector, top_k integer,
    event_top_k integer, exact_scan_min integer, open_members uuid[], at timestamptz
) RETURNS TABLE (fact_ids uuid[], event_ids uuid[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT ARRAY(
           SELECT w.fact_id
           FROM public.haki_fact_walk(p_project_id, p_subject_id, query_embedding, top_k,
                                      exact_scan_min, at, open_members) AS w
       ),
       ARRAY(
           SELECT w.event_id
           FROM public.haki_event_walk(p_project_id, p_subject_id, query_embedding, event_top_k,
                                       exact_scan_min, at) AS w
           WHERE event_top_k OPERATOR(pg_catalog.>) 0
       )
$$;

-- The text side: the servable facts and the events that match the match_words rarest of the
-- query's words (highest idf: a text that matches none of them can only rank low), at most
-- per_word facts and event_per_word events a word, as ids. A word that many of a big scope's
-- facts name reads its matches from the scope's newest facts (at most probe_rows of them,
-- haki_newest_servable_facts) instead of its GIN postings (haki_fact_postings, one index a
-- configuration), whose bitmap would be built whole (haki_text_probe; the scope's size is read
-- only when a word is common enough to need it and the sample is full: migration 0021).
CREATE FUNCTION public.haki_unified_text_side(
    p_project_id text, p_subject_id text, config regconfig, words text[], word_queries tsquery[],
    idfs double precision[], shares double precision[], sample_texts bigint, sample_docs integer,
    match_words integer, per_word integer, event_per_word integer, probe_rows integer,
    min_cost double precision, min_postings double precision, open_members uuid[],
    at timestamptz
) RETURNS TABLE (fact_ids uuid[], event_ids uuid[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH scope_facts AS MATERIALIZED (
    SELECT public.haki_probe_scope_facts(
               p_project_id, p_subject_id,
               (SELECT pg_catalog.max(s.share) FROM pg_catalog.unnest(shares) AS s(share)),
               sample_texts, sample_docs, per_word, probe_rows, min_cost, min_postings) AS facts
),
rare AS MATERIALIZED (
    SELECT w.word_query,
           public.haki_text_probe(w.share, (SELECT sf.facts FROM scope_facts AS sf), per_word,
                                  probe_rows, min_cost, min_postings) AS probe
    FROM ROWS FROM (pg_catalog.unnest(words), pg_catalog.unnest(word_queries), pg_catalog.unnest(idfs),
                   pg_catalog.unnest(shares)) AS w(word, word_query, idf, share)
    ORDER BY w.idf DESC, w.word
    LIMIT match_words
)
SELECT ARRAY(
           SELECT DISTINCT h.fact_id
           FROM rare AS i
           CROSS JOIN LATERAL (
               SELECT p.fact_id
               FROM (SELECT e.fact_id
                     FROM public.haki_fact_postings(p_project_id, p_subject_id,
                                                    'english'::regconfig, i.word_query, at) AS e
                     WHERE config OPERATOR(pg_catalog.=) 'english'::regconfig
                     UNION ALL
                     SELECT s.fact_id
                     FROM public.haki_fact_postings(p_project_id, p_subject_id,
                                                    'simple'::regconfig, i.word_query, at) AS s
                     WHERE config OPERATOR(pg_catalog.<>) 'english'::regconfig) AS p
               WHERE NOT i.probe
                 AND NOT (p.fact_id OPERATOR(pg_catalog.=) ANY (open_members))
               LIMIT per_word
           ) AS h
           UNION
           SELECT h.fact_id
           FROM rare AS i
           CROSS JOIN LATERAL (
               SELECT n.fact_id
               FROM public.haki_newest_servable_facts(i.probe, p_project_id, p_subject_id, at,
                                                      probe_rows) AS n
               WHERE public.haki_text_vector(config, n.search_vector, n.search_vector_english)
                     OPERATOR(pg_catalog.@@) i.word_query
                 AND NOT (n.fact_id OPERATOR(pg_catalog.=) ANY (open_members))
               LIMIT per_word
           ) AS h
       ),
       ARRAY(
           SELECT DISTINCT h.event_id
           FROM rare AS i
           CROSS JOIN LATERAL (
               SELECT e.event_id
               FROM public.haki_event_postings_for(p_project_id, p_subject_id, config,
                                                   i.word_query, at) AS e
               LIMIT event_per_word
           ) AS h
       )
$$;

-- The pool and its score: every walked or matched fact and event, read once by primary key, with
-- every part of its score: cosine distance, text rank (the share of the query's idf a text
-- matches: sum(idf(matched)) / sum(idf(query)), 0 for a text that holds none of the words),
-- recency (a fact's from its validity, an episode's from occurred_at). Phase 1 keeps the walked
-- items and, of each kind, the top_k matched ones by text rank; phase 2 scores them with one
-- hybrid formula and keeps the candidate_limit best, facts first on a tie (the cheaper
-- representation of a turn), then by id. One row of parallel arrays in that order (null when
-- nothing is kept).
CREATE FUNCTION public.haki_unified_pool(
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
               (e.embedding OPERATOR(public.<=>) query_embedding),
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
