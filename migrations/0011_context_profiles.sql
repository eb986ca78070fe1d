-- Context profiles (spec/context-profiles.md): the `unified` profile, the default, and the
-- `facts_first` profile of spec/context-assembler.md, which traces keep apart.

-- Which rules built a trace. Every call logged before this migration ran under the rules of
-- context-assembler.md, which are now `facts_first`; the default only labels those rows, and is
-- dropped so that each insert must name its profile.
ALTER TABLE context_calls
    ADD COLUMN profile text NOT NULL DEFAULT 'facts_first'
        CHECK (profile IN ('unified', 'facts_first'));
ALTER TABLE context_calls ALTER COLUMN profile DROP DEFAULT;

-- Unified rule 2: events get a full-text side, built once at write time like the facts'
-- (migration 0004), and matched through their scope's postings (as facts, migration 0009).
-- Unified rule 1 allows stemming: both tables also get an `english` tsvector, which the unified
-- text side reads when HAKI_TEXT_SEARCH_CONFIG is `english` (the default; `simple` reads
-- search_vector). Measured on LoCoMo's dev half: +1.3 points of evidence recall ("painted" finds
-- "painting"; docs/quality.md). facts_first keeps websearch_to_tsquery('simple') on search_vector.
-- fastupdate off on the new indexes: with the pending list on, a scope's text top-K read every
-- entry written since the last vacuum (9 ms instead of 0.8 ms for the facts' index after 50k
-- writes, issue 13).
ALTER TABLE events
    ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    ADD COLUMN search_vector_english tsvector
        GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
ALTER TABLE facts
    ADD COLUMN search_vector_english tsvector
        GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
CREATE INDEX events_scoped_search_gin ON events
    USING gin (public.haki_scoped_search_vector(project_id, subject_id, search_vector))
    WITH (fastupdate = off);
CREATE INDEX events_scoped_english_gin ON events
    USING gin (public.haki_scoped_search_vector(project_id, subject_id, search_vector_english))
    WITH (fastupdate = off);
CREATE INDEX facts_scoped_english_gin ON facts
    USING gin (public.haki_scoped_search_vector(project_id, subject_id, search_vector_english))
    WITH (fastupdate = off);

-- The words of a query that the unified text side matches (unified rule 1), each as its own
-- tsquery, in the order they first appear, at most max_words of them so that a long query costs
-- a bounded number of index probes. `english`: the query's stems, without the stop words that
-- the configuration drops; `simple`: its lexemes without English stop words (a word that the
-- `english` configuration maps to nothing). A lexeme becomes a tsquery through plainto_tsquery,
-- which reads no operator in it.
CREATE FUNCTION public.haki_query_words(query text, config regconfig, max_words integer)
RETURNS TABLE (word text, word_query tsquery)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT u.lexeme, pg_catalog.plainto_tsquery('simple', u.lexeme)
FROM pg_catalog.unnest(pg_catalog.to_tsvector(config, query)) AS u(lexeme, positions, weights)
WHERE config OPERATOR(pg_catalog.<>) 'simple'::regconfig
   OR pg_catalog.to_tsvector('english', u.lexeme) OPERATOR(pg_catalog.<>) ''::tsvector
ORDER BY u.positions[1], u.lexeme
LIMIT max_words
$$;

-- The search vector of a configuration: the unified text side reads one of the two columns.
CREATE FUNCTION public.haki_text_vector(config regconfig, simple tsvector, english tsvector)
RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN config OPERATOR(pg_catalog.=) 'english'::regconfig THEN english ELSE simple END
$$;

-- BM25's inverse document frequency of a word found in df of docs documents (unified rule 1).
CREATE FUNCTION public.haki_bm25_idf(docs bigint, df bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT pg_catalog.ln(1.0 + (greatest(docs, df) - df + 0.5) / (df + 0.5))
$$;

-- The token estimate of spec/context-assembler.md: max(1, len(text) // 4).
CREATE FUNCTION public.haki_tokens(content text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT greatest(1, pg_catalog.char_length(content) / 4)
$$;

-- Recency exp(-age / tau), clamped to 1 for a date in the future. exp() raises an underflow
-- error below ~exp(-745), which a memory older than ~60 years reached: the exponent stops at 700.
CREATE FUNCTION public.haki_recency(dated_at timestamptz, tau_seconds double precision)
RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT least(1.0, pg_catalog.exp(-least(700.0,
    greatest(0.0, extract(epoch FROM pg_catalog.now() - dated_at)) / tau_seconds)))
$$;

-- The hybrid score of spec/context-assembler.md: a weighted sum of similarity (0 without a
-- query vector), text rank and recency. The weights are not contract (they are parameters).
CREATE FUNCTION public.haki_hybrid_score(
    cosine_distance double precision, text_rank double precision, recency double precision,
    w_similarity double precision, w_text_rank double precision, w_recency double precision
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT w_similarity * coalesce(1 - cosine_distance, 0) + w_text_rank * text_rank + w_recency * recency
$$;

-- The facts of a scope that a hard filter hides and the trace reports as `blocked` (spec,
-- hard filters): members of an open ConflictSet (`conflict_open`), then stale volatile facts
-- not already blocked by a conflict (`volatility_expired`, partial index of migration 0005).
CREATE FUNCTION public.haki_blocked_facts(p_project_id text, p_subject_id text)
RETURNS TABLE (fact_id uuid, reason_code text, tokens integer)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH open_members AS MATERIALIZED (
    SELECT u.fact_id
    FROM pg_catalog.unnest(public.haki_open_conflict_facts(p_project_id, p_subject_id)) AS u(fact_id)
)
SELECT f.fact_id, 'conflict_open', public.haki_tokens(f.content)
FROM open_members AS om
JOIN public.facts AS f ON f.project_id = p_project_id AND f.fact_id = om.fact_id
WHERE f.subject_id = p_subject_id
  AND f.status = 'active'
  AND (f.valid_to IS NULL OR f.valid_to > pg_catalog.now())
UNION ALL
SELECT f.fact_id, 'volatility_expired', public.haki_tokens(f.content)
FROM public.facts AS f
WHERE f.project_id = p_project_id
  AND f.subject_id = p_subject_id
  AND f.status = 'active'
  AND f.volatility = 'volatile'
  AND (f.valid_to IS NULL OR f.valid_to > pg_catalog.now())
  AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= pg_catalog.now()
  AND NOT EXISTS (SELECT 1 FROM open_members AS om WHERE om.fact_id = f.fact_id)
$$;

-- A fact that the hard filters let through to scoring (spec, hard filters; the scope and the
-- open-conflict test are the statements' own): active, still business-valid, and not a stale
-- volatile fact.
CREATE FUNCTION public.haki_fact_servable(
    status text, valid_to timestamptz, volatility text, valid_from timestamptz,
    recorded_from timestamptz, stale_after interval
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT status = 'active'
   AND (valid_to IS NULL OR valid_to > pg_catalog.now())
   AND NOT (volatility = 'volatile' AND coalesce(valid_from, recorded_from) + stale_after <= pg_catalog.now())
$$;

-- The sample that the unified profile's document frequencies are counted on (unified rule 1:
-- the per-word statistics must not grow with the scope): the search vectors, in config, of the
-- scope's newest sample_docs active facts and newest sample_docs events. Exact statistics for a
-- scope up to that size; an estimate from its newest texts beyond. Read through facts_scope_id
-- and events_scope_occurred backwards, so a call reads at most 2 * sample_docs rows.
CREATE FUNCTION public.haki_scope_sample(
    p_project_id text, p_subject_id text, config regconfig, sample_docs integer
) RETURNS TABLE (sv tsvector)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT fs.sv
FROM (
    SELECT public.haki_text_vector(config, f.search_vector, f.search_vector_english) AS sv
    FROM public.facts AS f
    WHERE f.project_id = p_project_id
      AND f.subject_id = p_subject_id
      AND f.status = 'active'
    ORDER BY f.fact_id DESC
    LIMIT sample_docs
) AS fs
UNION ALL
SELECT es.sv
FROM (
    SELECT public.haki_text_vector(config, e.search_vector, e.search_vector_english) AS sv
    FROM public.events AS e
    WHERE e.project_id = p_project_id
      AND e.subject_id = p_subject_id
    ORDER BY e.occurred_at DESC
    LIMIT sample_docs
) AS es
$$;

-- The words of a query with their BM25 idf over the scope's sample (unified rule 1): the text
-- rank of a text is sum(idf of the words it matches) / sum(idf of every word).
CREATE FUNCTION public.haki_query_idf(
    p_project_id text, p_subject_id text, query text, config regconfig, max_words integer,
    sample_docs integer
) RETURNS TABLE (word text, word_query tsquery, idf double precision)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH words AS MATERIALIZED (
    SELECT w.word, w.word_query
    FROM public.haki_query_words(query, config, max_words) AS w
    WHERE pg_catalog.numnode(w.word_query) > 0
),
sample AS MATERIALIZED (
    SELECT s.sv
    FROM public.haki_scope_sample(p_project_id, p_subject_id, config, sample_docs) AS s
    WHERE EXISTS (SELECT 1 FROM words)
)
SELECT w.word, w.word_query,
       public.haki_bm25_idf((SELECT count(*) FROM sample),
                            (SELECT count(*) FROM sample AS s WHERE s.sv OPERATOR(pg_catalog.@@) w.word_query))
FROM words AS w
$$;
