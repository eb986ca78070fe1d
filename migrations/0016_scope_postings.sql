-- A word's postings written once (issue 17): fact_candidates, multi_hop_facts, linked_facts and
-- unified_candidates each spelled out the same lookup, and unified_candidates twice over, once
-- per text search configuration and once more for events. These functions are that lookup.
-- Like those of migration 0015 they are LANGUAGE sql, one SELECT, not STRICT, no SET, STABLE,
-- so the planner inlines them: a statement that calls one plans as the copy it replaces
-- (tests/test_sql_rules.py).
--
-- What they leave to the caller: the open-conflict exclusion and the LIMIT a word. The
-- exclusion stays in the caller's WHERE, so it still applies before the LIMIT; as an argument
-- (a subquery) it would keep the function from being inlined at all.

-- The servable facts of a scope that match a word, in a configuration (`english` reads
-- search_vector_english, any other search_vector: haki_text_vector, migration 0011), through
-- the scoped match of migration 0009. The configuration must be a constant: the planner then
-- folds haki_text_vector to the one column, and the match to the expression of that column's
-- GIN index (facts_scoped_search_gin, facts_scoped_english_gin); a statement whose
-- configuration is a parameter calls haki_fact_postings_for. The scope test is written so no
-- B-tree matches it: the planner ANDed the GIN bitmap with one of every fact of the scope from
-- facts_scope_id, which the scope lexeme already does (0.7 ms at 10k). The rows are the facts'
-- own: a caller reads the columns it needs, with their types (a column declared `vector` would
-- drop embedding's typmod, and the caller's plan would carry a cast the copy did not have).
CREATE FUNCTION public.haki_fact_postings(
    p_project_id text, p_subject_id text, config regconfig, word tsquery, at timestamptz
) RETURNS SETOF public.facts
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT f.*
FROM public.facts AS f
WHERE (f.project_id OPERATOR(pg_catalog.=) p_project_id
       AND f.subject_id OPERATOR(pg_catalog.=) p_subject_id) IS TRUE
  AND public.haki_scoped_search_vector(
          f.project_id, f.subject_id,
          public.haki_text_vector(config, f.search_vector, f.search_vector_english))
      OPERATOR(pg_catalog.@@) (word OPERATOR(pg_catalog.&&)
                               public.haki_scope_lexeme(p_project_id, p_subject_id)::tsquery)
  AND public.haki_text_vector(config, f.search_vector, f.search_vector_english)
      OPERATOR(pg_catalog.@@) word
  AND public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from, f.recorded_from,
                                f.stale_after, f.recorded_to, f.believed_valid_to, at)
$$;

-- haki_fact_postings in a configuration known only when the statement runs (unified_candidates
-- under its generic plan), read only when `enabled` (a word the probe rule leaves to the GIN
-- postings, as haki_newest_servable_facts takes the others): one branch a configuration, each
-- on its own index behind one one-time filter, so only the configured one is read. Ids only:
-- a UNION ALL branch with a WHERE stays a subquery, and only one that returns exactly what the
-- caller reads plans without a scan node of its own.
CREATE FUNCTION public.haki_fact_postings_for(
    enabled boolean, p_project_id text, p_subject_id text, config regconfig, word tsquery,
    at timestamptz
) RETURNS TABLE (fact_id uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT p.fact_id
FROM public.haki_fact_postings(p_project_id, p_subject_id, 'english'::regconfig, word, at) AS p
WHERE config OPERATOR(pg_catalog.=) 'english'::regconfig
  AND enabled
UNION ALL
SELECT p.fact_id
FROM public.haki_fact_postings(p_project_id, p_subject_id, 'simple'::regconfig, word, at) AS p
WHERE config OPERATOR(pg_catalog.<>) 'english'::regconfig
  AND enabled
$$;

-- The same for the events of a scope held at an instant (events_scoped_search_gin,
-- events_scoped_english_gin, migration 0011).
CREATE FUNCTION public.haki_event_postings(
    p_project_id text, p_subject_id text, config regconfig, word tsquery, at timestamptz
) RETURNS TABLE (event_id uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT e.event_id
FROM public.events AS e
WHERE (e.project_id OPERATOR(pg_catalog.=) p_project_id
       AND e.subject_id OPERATOR(pg_catalog.=) p_subject_id) IS TRUE
  AND public.haki_event_held(e.occurred_at, e.recorded_at, at)
  AND public.haki_scoped_search_vector(
          e.project_id, e.subject_id,
          public.haki_text_vector(config, e.search_vector, e.search_vector_english))
      OPERATOR(pg_catalog.@@) (word OPERATOR(pg_catalog.&&)
                               public.haki_scope_lexeme(p_project_id, p_subject_id)::tsquery)
  AND public.haki_text_vector(config, e.search_vector, e.search_vector_english)
      OPERATOR(pg_catalog.@@) word
$$;

-- haki_event_postings in a configuration known only when the statement runs, as
-- haki_fact_postings_for (events have no probe).
CREATE FUNCTION public.haki_event_postings_for(
    p_project_id text, p_subject_id text, config regconfig, word tsquery, at timestamptz
) RETURNS TABLE (event_id uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT p.event_id
FROM public.haki_event_postings(p_project_id, p_subject_id, 'english'::regconfig, word, at) AS p
WHERE config OPERATOR(pg_catalog.=) 'english'::regconfig
UNION ALL
SELECT p.event_id
FROM public.haki_event_postings(p_project_id, p_subject_id, 'simple'::regconfig, word, at) AS p
WHERE config OPERATOR(pg_catalog.<>) 'english'::regconfig
$$;
