-- A small scope never reads its size from the planner's statistics (issue 13, write-heavy
-- reads). haki_probe_scope_facts (migration 0013) read haki_scope_facts_estimate whenever a
-- query word was common enough that the whole table could make it worth a probe: 0.21-0.27 ms
-- of a 100-fact scope's unified candidates (3.6 ms), for an answer that the statement already
-- holds. The text sample (haki_query_df, or linked_facts' entity sample) reads the scope's newest
-- sample_limit facts and as many events: when it holds fewer than sample_limit texts, every
-- believed fact of the scope is in it, so a word's postings number at most sample_limit, far
-- below the probe's min_postings (a test holds the constants to that), and GIN is the cheaper
-- side. The rule now takes the sample's size and its limit and answers NULL (no probe) there
-- without reading the statistics. Bigger scopes are decided exactly as before.
CREATE FUNCTION public.haki_probe_scope_facts(
    p_project_id text, p_subject_id text, max_share double precision, sample_texts bigint,
    sample_limit integer, match_limit integer, probe_rows integer, min_cost double precision,
    min_postings double precision
) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN sample_texts >= sample_limit
             AND public.haki_text_probe(max_share, c.reltuples::double precision, match_limit,
                                        probe_rows, min_cost, min_postings)
            THEN public.haki_scope_facts_estimate(p_project_id, p_subject_id) END
FROM pg_catalog.pg_class AS c
WHERE c.oid = 'public.facts'::regclass
$$;

-- The version without the sample's size has no caller left (queries/context.sql calls the one
-- above in unified_candidates and linked_facts).
DROP FUNCTION public.haki_probe_scope_facts(
    text, text, double precision, integer, integer, double precision, double precision
);
