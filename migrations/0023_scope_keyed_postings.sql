-- A scope's postings hold only its own texts (issue 13: the text side of a call at 10k).
--
-- Migration 0009 gave every text one more lexeme, its scope's, so that GIN intersects a word's
-- postings with the scope's inside one index. The word's postings are still those of every
-- scope: a name that 2,300 facts of the table carry, 232 of them in the scope, is 2,300 items
-- to walk and intersect with the scope's 10,800. `unified` reads a word's postings up to eight
-- times a call (facts and events) and an entity's twice more. Here each lexeme of the index is
-- its scope's key followed by the lexeme, so a word's postings in a scope are exactly the
-- scope's texts that hold it. One lookup of the 10k scope of the benchmark world (106,500
-- facts), a round trip of 0.12 ms included: 'alice' 0.51 -> 0.31 ms, 'likes' 0.97 -> 0.46,
-- 'peugeot' 0.38 -> 0.28 (docs/performance.md, "A scope's postings hold only its texts").
--
-- - The key: 16 hex digits of the scope's md5 and a dot. Two scopes whose keys collide share
--   postings, never results: every caller keeps its scope test and `vector @@ query` beside the
--   keyed match (haki_fact_postings, haki_event_postings).
-- - Positions and weights are kept, so a phrase matches the index as it matches the text.
-- - Each text also carries the key alone, which a query of negations alone (websearch `-dog`)
--   requires: it reads the scope's texts, never the whole index.
-- - Same index names, so every plan, test and benchmark that names them reads the new ones.

CREATE FUNCTION public.haki_scope_key(project_id text, subject_id text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT pg_catalog.substr(pg_catalog.md5(project_id OPERATOR(pg_catalog.||) chr(31)
                                        OPERATOR(pg_catalog.||) subject_id), 1, 16)
       OPERATOR(pg_catalog.||) '.'
$$;

-- A lexeme quoted as tsvector and tsquery input read it: backslashes and quotes escaped.
CREATE FUNCTION public.haki_tsvector_literal(lexeme text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT '''' OPERATOR(pg_catalog.||)
       pg_catalog.replace(pg_catalog.replace(lexeme, '\', '\\'), '''', '''''')
       OPERATOR(pg_catalog.||) ''''
$$;

-- The text form of a tsvector or a tsquery with the scope's key inside every quoted lexeme.
CREATE FUNCTION public.haki_scope_keyed(project_id text, subject_id text, quoted text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT pg_catalog.regexp_replace(quoted, $re$'((?:[^']|'')*)'$re$,
                                 '''' OPERATOR(pg_catalog.||) public.haki_scope_key(project_id, subject_id)
                                 OPERATOR(pg_catalog.||) '\1''', 'g')
$$;

-- What a scoped GIN index holds of a text: each lexeme behind the scope's key, with its positions
-- and weights, and the key alone. tsvector's text form quotes every lexeme, so putting the key
-- inside each opening quote renames them all and keeps the rest. Computed on every write of a
-- text, once an index: 11 us for six lexemes, against 1.7 us for migration 0009's vector and
-- 20 us to rebuild the vector lexeme by lexeme (unnest, string_agg).
CREATE FUNCTION public.haki_scope_keyed_vector(project_id text, subject_id text, vector tsvector)
RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT (public.haki_scope_keyed(project_id, subject_id, vector::text)
        OPERATOR(pg_catalog.||) ' '
        OPERATOR(pg_catalog.||) public.haki_tsvector_literal(public.haki_scope_key(project_id, subject_id)))::tsvector
$$;

-- The same query against a scope's keyed index: every lexeme behind the scope's key (tsquery's
-- text form quotes each one). A query that GIN can answer from no lexeme of its own (querytree
-- 'T': a negation alone, `-dog`) is ANDed with the key alone, so it reads the scope's texts
-- rather than the whole index. The others are not: ANDed with the key, a lookup of a word that
-- no text of the scope holds walked the key's postings, 0.09 -> 0.26 ms. Evaluated once a scan.
CREATE FUNCTION public.haki_scope_keyed_query(project_id text, subject_id text, query tsquery)
RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN pg_catalog.querytree(query) OPERATOR(pg_catalog.=) 'T'
            THEN public.haki_scope_keyed(project_id, subject_id, query::text)::tsquery
                 OPERATOR(pg_catalog.&&)
                 public.haki_tsvector_literal(public.haki_scope_key(project_id, subject_id))::tsquery
            ELSE public.haki_scope_keyed(project_id, subject_id, query::text)::tsquery
       END
$$;

DROP INDEX facts_scoped_search_gin;
DROP INDEX facts_scoped_english_gin;
DROP INDEX events_scoped_search_gin;
DROP INDEX events_scoped_english_gin;

-- fastupdate off, as migration 0013 chose: a memory service is write-heavy, and a pending list
-- made every read after a batch scan it.
CREATE INDEX facts_scoped_search_gin ON public.facts
    USING gin (public.haki_scope_keyed_vector(project_id, subject_id, search_vector))
    WITH (fastupdate = off);
CREATE INDEX facts_scoped_english_gin ON public.facts
    USING gin (public.haki_scope_keyed_vector(project_id, subject_id, search_vector_english))
    WITH (fastupdate = off);
CREATE INDEX events_scoped_search_gin ON public.events
    USING gin (public.haki_scope_keyed_vector(project_id, subject_id, search_vector))
    WITH (fastupdate = off);
CREATE INDEX events_scoped_english_gin ON public.events
    USING gin (public.haki_scope_keyed_vector(project_id, subject_id, search_vector_english))
    WITH (fastupdate = off);

-- The lookups of migration 0016, on the keyed indexes; otherwise unchanged (inlinable: one
-- SELECT, not STRICT, no SET, STABLE).
CREATE OR REPLACE FUNCTION public.haki_fact_postings(
    p_project_id text, p_subject_id text, config regconfig, word tsquery, at timestamptz
) RETURNS SETOF public.facts
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT f.*
FROM public.facts AS f
WHERE (f.project_id OPERATOR(pg_catalog.=) p_project_id
       AND f.subject_id OPERATOR(pg_catalog.=) p_subject_id) IS TRUE
  AND public.haki_scope_keyed_vector(
          f.project_id, f.subject_id,
          public.haki_text_vector(config, f.search_vector, f.search_vector_english))
      OPERATOR(pg_catalog.@@) public.haki_scope_keyed_query(p_project_id, p_subject_id, word)
  AND public.haki_text_vector(config, f.search_vector, f.search_vector_english)
      OPERATOR(pg_catalog.@@) word
  AND public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from, f.recorded_from,
                                f.stale_after, f.recorded_to, f.believed_valid_to, at)
$$;

CREATE OR REPLACE FUNCTION public.haki_event_postings(
    p_project_id text, p_subject_id text, config regconfig, word tsquery, at timestamptz
) RETURNS TABLE (event_id uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT e.event_id
FROM public.events AS e
WHERE (e.project_id OPERATOR(pg_catalog.=) p_project_id
       AND e.subject_id OPERATOR(pg_catalog.=) p_subject_id) IS TRUE
  AND public.haki_event_held(e.occurred_at, e.recorded_at, at)
  AND public.haki_scope_keyed_vector(
          e.project_id, e.subject_id,
          public.haki_text_vector(config, e.search_vector, e.search_vector_english))
      OPERATOR(pg_catalog.@@) public.haki_scope_keyed_query(p_project_id, p_subject_id, word)
  AND public.haki_text_vector(config, e.search_vector, e.search_vector_english)
      OPERATOR(pg_catalog.@@) word
$$;

-- Nothing reads the lexeme of migration 0009 any more.
DROP FUNCTION public.haki_scoped_search_vector(text, text, tsvector);
DROP FUNCTION public.haki_scope_lexeme(text, text);
