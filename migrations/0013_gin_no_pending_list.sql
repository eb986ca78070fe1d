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
