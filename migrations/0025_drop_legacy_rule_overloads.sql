-- The rules without an instant (migrations 0010 and 0011), kept by migration 0012 as wrappers
-- of the versions that take `at`: no statement of queries/, tests/sql/ or benchmarks/sql/ and no
-- function calls them any more, and each made a DBA reading the schema wonder which one runs.
-- The rule functions now live in migrations/rules.sql, re-applied after the numbered files.
DROP FUNCTION public.haki_blocked_facts(text, text);
DROP FUNCTION public.haki_fact_servable(text, timestamptz, text, timestamptz, timestamptz, interval);
DROP FUNCTION public.haki_open_conflict_facts(text, text);
DROP FUNCTION public.haki_recency(timestamptz, double precision);
DROP FUNCTION public.haki_scope_sample(text, text, regconfig, integer);
