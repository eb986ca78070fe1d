-- Multi-hop's reads bounded in both profiles (docs/spec/context-profiles.md, "Multi-hop reads are
-- bounded"). `unified`'s linked_facts matched a name that many of a big scope's facts carry from
-- the scope's newest facts (haki_text_probe, as a common word of rule 1); `facts_first`'s
-- multi_hop_facts always read its GIN postings, whose bitmap is built whole before LIMIT stops:
-- a name in 20,200 facts of a 1M-fact scope cost 4.4 ms an entity. One function now tells both
-- statements each entity's sample frequency and whether it is probed, so the rule has one home.
--
-- For each entity (in the given order; those with no lexeme dropped): its document frequency in
-- the scope's statistics sample (the `simple` vectors of the newest sample_docs facts and events,
-- haki_scope_sample), the sample's size, and the probe: whether its matches are read from the
-- scope's newest servable facts instead of its postings. The scope's size is estimated only when
-- the commonest entity could be probed and the sample is full (haki_probe_scope_facts).
CREATE FUNCTION public.haki_entity_probes(
    p_project_id text, p_subject_id text, p_entities text[], sample_docs integer,
    match_limit integer, probe_rows integer, probe_min_cost double precision,
    probe_min_postings double precision, at timestamptz
) RETURNS TABLE (entity text, entity_rank bigint, etsq tsquery, df bigint, docs bigint, probe boolean)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH e AS MATERIALIZED (
    SELECT u.entity, u.entity_rank, pg_catalog.plainto_tsquery('simple', u.entity) AS etsq
    FROM pg_catalog.unnest(p_entities) WITH ORDINALITY AS u(entity, entity_rank)
),
names AS MATERIALIZED (
    -- Entities are names, matched as written: the `simple` vectors of the scope's sample.
    SELECT s.sv
    FROM public.haki_scope_sample(p_project_id, p_subject_id, 'simple'::regconfig, sample_docs, at) AS s
    WHERE EXISTS (SELECT 1 FROM e)
),
counted AS MATERIALIZED (
    -- Each entity's document frequency, counted once (in the same SELECT as the share, the
    -- planner copied the count into each use).
    SELECT e.entity, e.entity_rank, e.etsq,
           (SELECT pg_catalog.count(*) FROM names AS n WHERE n.sv OPERATOR(pg_catalog.@@) e.etsq) AS df,
           (SELECT pg_catalog.count(*) FROM names) AS docs
    FROM e
    WHERE pg_catalog.numnode(e.etsq) OPERATOR(pg_catalog.>) 0
),
named AS MATERIALIZED (
    SELECT c.entity, c.entity_rank, c.etsq, c.df, c.docs,
           c.df::double precision OPERATOR(pg_catalog./) nullif(c.docs, 0) AS share
    FROM counted AS c
),
scope_facts AS MATERIALIZED (
    SELECT public.haki_probe_scope_facts(p_project_id, p_subject_id,
                                         (SELECT pg_catalog.max(n.share) FROM named AS n),
                                         (SELECT pg_catalog.max(n.docs) FROM named AS n), sample_docs,
                                         match_limit, probe_rows, probe_min_cost,
                                         probe_min_postings) AS facts
)
SELECT n.entity, n.entity_rank, n.etsq, n.df, n.docs,
       public.haki_text_probe(n.share, (SELECT sf.facts FROM scope_facts AS sf), match_limit,
                              probe_rows, probe_min_cost, probe_min_postings)
FROM named AS n
ORDER BY n.entity_rank
$$;

COMMENT ON FUNCTION public.haki_entity_probes(text, text, text[], integer, integer, integer, double precision, double precision, timestamptz) IS
    'Multi-hop''s entities with their sample frequency and whether each reads the scope''s newest facts (docs/spec/context-profiles.md, "Multi-hop reads are bounded"; migration 0039).';
