-- Full text stays fast under writes (issue 13): the facts' `simple` index of migration 0009 was
-- the last scoped GIN index with a pending list (fastupdate on, 4 MB). Its entries sit unsorted
-- until a vacuum or a full list merges them, and every search reads all of them: a 100-fact
-- scope's text top-K took 9 ms after 50k writes, 0.8 ms after VACUUM. Measured by
-- benchmarks/gin_pending.py under a steady write load (docs/performance.md, "Full text under
-- writes"): with the pending list, the candidates stage of a 100-fact scope took 5.0 ms
-- (`unified`) and 3.4 ms (`facts_first`), and a write batch 98 ms (a writer that fills the list
-- merges it inline); fastupdate off took 3.2 ms, 2.5 ms and 64 ms. A 64 kB list (3.6, 2.7,
-- 65 ms) and a clean after each batch (3.4, 2.7, 72 ms) were no better. Migration 0011 made
-- the three indexes it created this way already.
ALTER INDEX facts_scoped_search_gin SET (fastupdate = off);

-- What the list holds now moves into the posting trees: turning fastupdate off does not.
SELECT pg_catalog.gin_clean_pending_list('facts_scoped_search_gin'::regclass);

-- How many facts a scope holds, from the planner's statistics (ANALYZE, autovacuum) rather than
-- a count: an upper bound, reltuples times the smaller of the frequencies of the scope's project
-- and its subject (a scope holds no more facts than either). A value outside a most-common list
-- is no more frequent than the rest of the table, nor than the least common listed value. NULL
-- before the first ANALYZE. The unified text side reads it to choose, for a word that many of
-- the scope's facts name, between the scope's GIN postings and its newest facts (the statements
-- of queries/context.sql say how; docs/performance.md, "Common words in big scopes").
CREATE FUNCTION public.haki_scope_facts_estimate(p_project_id text, p_subject_id text)
RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT greatest(c.reltuples, 0) * (
    SELECT min(coalesce(
               s.most_common_freqs[pg_catalog.array_position(
                   s.most_common_vals::text::text[],
                   CASE s.attname WHEN 'project_id' THEN p_project_id ELSE p_subject_id END)],
               CASE WHEN s.most_common_freqs IS NULL
                    THEN 1.0 / greatest(1.0, CASE WHEN s.n_distinct < 0 THEN -s.n_distinct * c.reltuples
                                                  ELSE s.n_distinct END)
                    ELSE least(1.0 - (SELECT sum(x) FROM pg_catalog.unnest(s.most_common_freqs) AS x),
                               (SELECT min(x) FROM pg_catalog.unnest(s.most_common_freqs) AS x))
               END))
    FROM pg_catalog.pg_stats AS s
    WHERE s.schemaname = 'public'
      AND s.tablename = 'facts'
      AND s.attname IN ('project_id', 'subject_id'))
FROM pg_catalog.pg_class AS c
WHERE c.oid = 'public.facts'::regclass
$$;

-- Whether to read a word's matches from the scope's newest facts rather than its GIN postings.
-- GIN has no ordered scan: the bitmap of a word is built whole before its first rows are read,
-- about share * facts postings (13.8 ms for 20,650 at 1M facts in one scope, 0.67 us each),
-- while the newest facts yield `limit` matches after about limit / share rows (3.0 ms for 2,903
-- rows, a word in 2.2 % of them, 1.03 us each). Newest first is cheaper when share^2 * facts >=
-- min_cost (the crossover is at limit * 1.5, 98 for 64 matches). It is chosen only where GIN
-- costs milliseconds, share * facts >= min_postings, so that smaller scopes never pay for the
-- estimate of their size (0.3 to 0.5 ms of planner statistics), and only for a word common
-- enough that limit matches come within half of probe_rows, the most the probe reads. facts is
-- haki_scope_facts_estimate (an upper bound, or the table's size to decide whether to read it):
-- no statistics, no probe.
CREATE FUNCTION public.haki_text_probe(
    share double precision, facts double precision, match_limit integer, probe_rows integer,
    min_cost double precision, min_postings double precision
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT coalesce(share * share * facts >= min_cost
                AND share * facts >= min_postings
                AND share * probe_rows >= 2 * match_limit, false)
$$;

-- The scope's size for haki_text_probe, read only when the most common of the words (or
-- entities) a statement matches could be probed at all: the table's size bounds the scope's,
-- and the rule grows with the share, so a scope whose words are all rare never pays for the
-- estimate. NULL (no probe) otherwise.
CREATE FUNCTION public.haki_probe_scope_facts(
    p_project_id text, p_subject_id text, max_share double precision, match_limit integer,
    probe_rows integer, min_cost double precision, min_postings double precision
) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN public.haki_text_probe(max_share, c.reltuples::double precision, match_limit,
                                        probe_rows, min_cost, min_postings)
            THEN public.haki_scope_facts_estimate(p_project_id, p_subject_id) END
FROM pg_catalog.pg_class AS c
WHERE c.oid = 'public.facts'::regclass
$$;

-- The probe that haki_text_probe chooses: the scope's newest facts servable at an instant, in id
-- (time) order, at most max_rows of them, read only when `enabled` (the word or entity the rule
-- picked). Inlined into unified_candidates and linked_facts, so the reads stop at the caller's
-- LIMIT; the caller filters by its word and by the open conflicts.
CREATE FUNCTION public.haki_newest_servable_facts(
    enabled boolean, p_project_id text, p_subject_id text, at timestamptz, max_rows integer
) RETURNS TABLE (
    fact_id uuid, embedding public.vector, search_vector tsvector, search_vector_english tsvector
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT f.fact_id, f.embedding, f.search_vector, f.search_vector_english
FROM public.facts AS f
WHERE enabled
  AND f.project_id OPERATOR(pg_catalog.=) p_project_id
  AND f.subject_id OPERATOR(pg_catalog.=) p_subject_id
  AND public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from, f.recorded_from,
                                f.stale_after, f.recorded_to, f.believed_valid_to, at)
ORDER BY f.fact_id DESC
LIMIT max_rows
$$;
