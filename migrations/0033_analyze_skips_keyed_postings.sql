-- ANALYZE skips the expressions of the scoped full-text indexes (migration 0023): computing their
-- statistics ran haki_scope_keyed_vector, a regexp over every sampled tsvector, twice a table,
-- and took four fifths of an ANALYZE of facts (docs/performance.md, "Statistics after bulk
-- writes"), which the statistics keeper runs after bulk writes and autovacuum after its own. No
-- plan reads them: the postings are matched under generic plans (migration 0017), where a
-- tsquery is a parameter and its selectivity the default, and the scope-size estimate reads the
-- project_id and subject_id columns' statistics (haki_scope_facts_estimate), which stay.
ALTER INDEX public.facts_scoped_search_gin ALTER COLUMN 1 SET STATISTICS 0;
ALTER INDEX public.facts_scoped_english_gin ALTER COLUMN 1 SET STATISTICS 0;
ALTER INDEX public.events_scoped_search_gin ALTER COLUMN 1 SET STATISTICS 0;
ALTER INDEX public.events_scoped_english_gin ALTER COLUMN 1 SET STATISTICS 0;
