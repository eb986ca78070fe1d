-- The match step of full text written once (docs/spec/context-profiles.md, rule 1 and "Multi-hop
-- reads are bounded"): a word of `unified`'s text side (haki_unified_text_side, migration 0029)
-- and an entity of either profile's multi-hop (haki_entity_matches, migration 0040) each read
-- their matching facts the same two ways, and the two functions spelled both out.
--
-- haki_text_matches: at most match_limit servable facts of the scope whose text, in config,
-- matches the query, none of `skip`: from the scope's postings (haki_fact_postings, one GIN
-- index a configuration, so one branch each, kept by config when the statement runs), or, when
-- `probe` is set, from the scope's newest servable facts (at most probe_rows of them), whose
-- bitmap is never built whole. search_vector is the matched text's vector in config. Inlined
-- into its caller (one SELECT, no SET clause), so each read's LIMIT stops its scan, as when the
-- callers held it; a caller passes `skip` as a column, not a subquery, which would keep it from
-- being inlined.
CREATE FUNCTION public.haki_text_matches(
    p_project_id text, p_subject_id text, config regconfig, query tsquery, probe boolean,
    skip uuid[], match_limit integer, probe_rows integer, at timestamptz
) RETURNS TABLE (fact_id uuid, embedding public.vector, search_vector tsvector)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
(SELECT f.fact_id, f.embedding, f.search_vector_english
 FROM public.haki_fact_postings(p_project_id, p_subject_id, 'english'::regconfig, query, at) AS f
 WHERE NOT probe
   AND config OPERATOR(pg_catalog.=) 'english'::regconfig
   AND NOT (f.fact_id OPERATOR(pg_catalog.=) ANY (skip))
 LIMIT match_limit)
UNION ALL
(SELECT f.fact_id, f.embedding, f.search_vector
 FROM public.haki_fact_postings(p_project_id, p_subject_id, 'simple'::regconfig, query, at) AS f
 WHERE NOT probe
   AND config OPERATOR(pg_catalog.<>) 'english'::regconfig
   AND NOT (f.fact_id OPERATOR(pg_catalog.=) ANY (skip))
 LIMIT match_limit)
UNION ALL
(SELECT n.fact_id, n.embedding, public.haki_text_vector(config, n.search_vector, n.search_vector_english)
 FROM public.haki_newest_servable_facts(probe, p_project_id, p_subject_id, at, probe_rows) AS n
 WHERE public.haki_text_vector(config, n.search_vector, n.search_vector_english)
       OPERATOR(pg_catalog.@@) query
   AND NOT (n.fact_id OPERATOR(pg_catalog.=) ANY (skip))
 LIMIT match_limit)
$$;

COMMENT ON FUNCTION public.haki_text_matches(text, text, regconfig, tsquery, boolean, uuid[], integer, integer, timestamptz) IS
    'The match step of full text: at most match_limit servable facts matching a word or an entity, from the scope''s postings or its newest facts (docs/spec/context-profiles.md, rule 1 and "Multi-hop reads are bounded"; migration 0041).';

-- The text side of migration 0029, its facts now read through haki_text_matches; the events'
-- side and the choice of the rare words are unchanged.
CREATE OR REPLACE FUNCTION public.haki_unified_text_side(
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
           SELECT DISTINCT m.fact_id
           FROM rare AS i
           CROSS JOIN LATERAL public.haki_text_matches(p_project_id, p_subject_id, config,
                                                       i.word_query, i.probe, open_members,
                                                       per_word, probe_rows, at) AS m
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

-- Multi-hop's statements (queries/context.sql) call haki_text_matches in `simple`; nothing calls
-- this one any more.
DROP FUNCTION public.haki_entity_matches(text, text, tsquery, boolean, uuid[], integer, integer, timestamptz);
