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
-- fastupdate off: with the pending list on, a scope's text top-K read every entry written since
-- the last vacuum (9 ms instead of 0.8 ms for the facts' index after 50k writes, issue 13).
ALTER TABLE events
    ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED;
CREATE INDEX events_scoped_search_gin ON events
    USING gin (public.haki_scoped_search_vector(project_id, subject_id, search_vector))
    WITH (fastupdate = off);

-- The words of a query that the unified text side matches (unified rule 1): the query's
-- `simple` lexemes without English stop words (a word that the `english` configuration maps to
-- nothing), each as its own tsquery, in the order they first appear, at most max_words of them
-- so that a long query costs a bounded number of index probes.
CREATE FUNCTION public.haki_query_words(query text, max_words integer)
RETURNS TABLE (word text, word_query tsquery)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT u.lexeme, pg_catalog.plainto_tsquery('simple', u.lexeme)
FROM pg_catalog.unnest(pg_catalog.to_tsvector('simple', query)) AS u(lexeme, positions, weights)
WHERE pg_catalog.to_tsvector('english', u.lexeme) OPERATOR(pg_catalog.<>) ''::tsvector
ORDER BY u.positions[1], u.lexeme
LIMIT max_words
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
