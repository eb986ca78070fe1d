-- Multi-hop's match step in one place (docs/spec/context-profiles.md, "Multi-hop reads are
-- bounded"): linked_facts (`unified`) and multi_hop_facts (`facts_first`) each wrote the same two
-- reads of an entity's matches. At most match_limit servable facts of the scope naming the entity
-- (`simple`, as written), none of `skip`: from the scope's postings, or, when the entity is probed
-- (haki_entity_probes, migration 0039), from the scope's newest servable facts, reading at most
-- probe_rows of them. Inlined into its caller (one SELECT, no SET clause), so each read's LIMIT
-- stops its scan, as when the statements held it.
CREATE FUNCTION public.haki_entity_matches(
    p_project_id text, p_subject_id text, etsq tsquery, probe boolean, skip uuid[],
    match_limit integer, probe_rows integer, at timestamptz
) RETURNS TABLE (fact_id uuid, embedding public.vector, search_vector tsvector)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
(SELECT f.fact_id, f.embedding, f.search_vector
 FROM public.haki_fact_postings(p_project_id, p_subject_id, 'simple'::regconfig, etsq, at) AS f
 WHERE NOT probe
   AND NOT (f.fact_id OPERATOR(pg_catalog.=) ANY (skip))
 LIMIT match_limit)
UNION ALL
(SELECT n.fact_id, n.embedding, n.search_vector
 FROM public.haki_newest_servable_facts(probe, p_project_id, p_subject_id, at, probe_rows) AS n
 WHERE n.search_vector OPERATOR(pg_catalog.@@) etsq
   AND NOT (n.fact_id OPERATOR(pg_catalog.=) ANY (skip))
 LIMIT match_limit)
$$;

COMMENT ON FUNCTION public.haki_entity_matches(text, text, tsquery, boolean, uuid[], integer, integer, timestamptz) IS
    'Multi-hop''s match step: at most match_limit servable facts naming an entity, from its postings or the scope''s newest facts (docs/spec/context-profiles.md, "Multi-hop reads are bounded"; migration 0040).';
