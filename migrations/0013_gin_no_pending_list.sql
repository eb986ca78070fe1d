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
