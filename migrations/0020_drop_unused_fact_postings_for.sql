-- haki_fact_postings_for (migration 0016) has had no caller since unified_candidates reads the
-- rare words' postings as whole rows, one arm a configuration (queries/context.sql
-- posting_hits): a DBA reviewing the schema should not have to wonder which statement uses it.
-- Its events counterpart, haki_event_postings_for, is still called.
DROP FUNCTION public.haki_fact_postings_for(boolean, text, text, regconfig, tsquery, timestamptz);
