-- The spec's rules over rows, one SQL function each (docs/spec/context-assembler.md,
-- docs/spec/context-profiles.md): hand-written and reviewed like code. Change a rule here.
--
-- Applied by service/db/migrations.py after the numbered migrations, in one transaction under their
-- lock, when its sha256 differs from the one recorded (version `rules`) or a numbered migration
-- has just run: so only CREATE OR REPLACE and COMMENT ON, safe to run any number of times.
-- - Only what the spec states the result of; access paths (walks, postings, scope keys and
--   buckets, statistics) stay in the numbered migrations.
-- - Never a function an index or a constraint is built on: a new body would not rebuild them.
-- - CREATE OR REPLACE keeps a signature, return type and parameter names; changing one takes a
--   numbered migration that drops the old function. A numbered migration sees the rules of before.
-- - Inlinable (LANGUAGE sql, one SELECT, not STRICT, no SET, no more volatile than the
--   caller), so a statement plans as the copy it replaces (tests/test_sql_rules.py).
--
-- `at` is the call's instant (docs/spec/context-profiles.md, "The instant of a call"), null now. A
-- constant null folds each rule to its current form; a function that must reach a partial index
-- under a generic plan writes an `at IS NULL` branch that passes NULL::timestamptz.


-- 1. Which facts the memory believes, and whether they still hold -------------------------------

-- Believed, the one definition (docs/spec/context-profiles.md, "The instant of a call"): active
-- now; as of t, recorded by t and not yet recorded_to. Null `at` folds to the partial indexes'
-- status = 'active'.
CREATE OR REPLACE FUNCTION public.haki_fact_believed(
    status text, recorded_from timestamptz, recorded_to timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN at IS NULL THEN status = 'active'
            ELSE recorded_from <= at AND (recorded_to IS NULL OR recorded_to > at) END
$$;
COMMENT ON FUNCTION public.haki_fact_believed(text, timestamptz, timestamptz, timestamptz) IS
'Rule: a fact believed at an instant (docs/spec/context-profiles.md, "The instant of a call"). Written and explained in migrations/rules.sql.';

-- The valid_to a fact carried at an instant (docs/spec/context-profiles.md, "The instant of a
-- call"): a status change rewrites valid_to and keeps the one believed until then in
-- believed_valid_to.
CREATE OR REPLACE FUNCTION public.haki_valid_to_at(
    valid_to timestamptz, recorded_to timestamptz, believed_valid_to timestamptz, at timestamptz
) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN at IS NULL OR recorded_to IS NULL THEN valid_to ELSE believed_valid_to END
$$;
COMMENT ON FUNCTION public.haki_valid_to_at(timestamptz, timestamptz, timestamptz, timestamptz) IS
'Rule: the valid_to a fact carried at an instant (docs/spec/context-profiles.md, "The instant of a call"). Written and explained in migrations/rules.sql.';

-- Business validity, `valid_to IS NULL OR valid_to > now()` (docs/spec/context-assembler.md,
-- "Hard filters"), by the valid_to carried at the instant.
CREATE OR REPLACE FUNCTION public.haki_fact_valid(
    valid_to timestamptz, recorded_to timestamptz, believed_valid_to timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_valid_to_at(valid_to, recorded_to, believed_valid_to, at) IS NULL
    OR public.haki_valid_to_at(valid_to, recorded_to, believed_valid_to, at) > coalesce(at, pg_catalog.now())
$$;
COMMENT ON FUNCTION public.haki_fact_valid(timestamptz, timestamptz, timestamptz, timestamptz) IS
'Rule: business validity at an instant (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';

-- Staleness, blocked `volatility_expired` (docs/spec/context-assembler.md, "Hard filters"): a
-- fact *older than* its stale_after, so it is still served at the very instant it reaches it.
-- `volatility = 'volatile'` stays a conjunct of its own: facts_scope_volatile_active names it.
CREATE OR REPLACE FUNCTION public.haki_fact_stale(
    volatility text, valid_from timestamptz, recorded_from timestamptz, stale_after interval,
    at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT volatility = 'volatile'
   AND coalesce(valid_from, recorded_from) + stale_after < coalesce(at, pg_catalog.now())
$$;
COMMENT ON FUNCTION public.haki_fact_stale(text, timestamptz, timestamptz, interval, timestamptz) IS
'Rule: a volatile fact gone stale by an instant (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';

-- An event held at an instant: recorded by then (docs/spec/context-profiles.md, "The instant of
-- a call"). When it occurred does not count: a call at the current instant serves a future-dated
-- event (a flight next week), so the same call as of its own instant (a replay) must too.
CREATE OR REPLACE FUNCTION public.haki_event_held(
    occurred_at timestamptz, recorded_at timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT at IS NULL OR recorded_at <= at
$$;
COMMENT ON FUNCTION public.haki_event_held(timestamptz, timestamptz, timestamptz) IS
'Rule: an event held at an instant (docs/spec/context-profiles.md, "The instant of a call"). Written and explained in migrations/rules.sql.';


-- 2. Open conflicts -----------------------------------------------------------------------------

-- Open-conflict membership, the one definition (docs/spec/context-assembler.md, "Hard filters";
-- docs/spec/context-profiles.md, "The instant of a call"): a set is open now by its status, as of
-- t if created by t and not resolved by t. Null `at` folds to conflict_sets_one_open_per_key's
-- status = 'open'; the scope is the caller's WHERE on subject_id.
CREATE OR REPLACE FUNCTION public.haki_open_conflict_members_at(p_project_id text, at timestamptz)
RETURNS TABLE (fact_id uuid, conflict_set_id uuid, subject_id text)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT cm.fact_id, cs.conflict_set_id, cs.subject_id
FROM public.conflict_members AS cm
JOIN public.conflict_sets AS cs
  ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
WHERE cm.project_id = p_project_id
  AND CASE WHEN at IS NULL THEN cs.status = 'open'
           ELSE cs.created_at <= at AND (cs.resolved_at IS NULL OR cs.resolved_at > at) END
$$;
COMMENT ON FUNCTION public.haki_open_conflict_members_at(text, timestamptz) IS
'Rule: the members of the ConflictSets open at an instant (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';

-- A project's open-conflict members now (docs/spec/context-assembler.md, "Hard filters"), for
-- statements that test facts one by one (haki_fact_rows): the fact is not an argument, because a
-- correlated argument keeps `NOT EXISTS` from becoming an anti-join.
CREATE OR REPLACE FUNCTION public.haki_open_conflict_members(p_project_id text)
RETURNS TABLE (fact_id uuid, conflict_set_id uuid)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT m.fact_id, m.conflict_set_id
FROM public.haki_open_conflict_members_at(p_project_id, NULL::timestamptz) AS m
$$;
COMMENT ON FUNCTION public.haki_open_conflict_members(text) IS
'Rule: the members of a project''s open ConflictSets now (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';

-- A scope's open-conflict members at an instant as one array (docs/spec/context-assembler.md,
-- "Hard filters"): read once a statement and tested on each row, cheaper than a nested loop
-- (migration 0017). Now is a branch of its own, so a generic plan still reaches the partial index.
CREATE OR REPLACE FUNCTION public.haki_open_conflict_facts(
    p_project_id text, p_subject_id text, at timestamptz
) RETURNS uuid[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT coalesce(array_agg(DISTINCT m.fact_id), '{}'::uuid[])
FROM (
    SELECT n.fact_id
    FROM public.haki_open_conflict_members_at(p_project_id, NULL::timestamptz) AS n
    WHERE at IS NULL
      AND n.subject_id = p_subject_id
    UNION ALL
    SELECT t.fact_id
    FROM public.haki_open_conflict_members_at(p_project_id, at) AS t
    WHERE at IS NOT NULL
      AND t.subject_id = p_subject_id
) AS m
$$;
COMMENT ON FUNCTION public.haki_open_conflict_facts(text, text, timestamptz) IS
'Rule: the facts of a scope''s ConflictSets open at an instant (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';


-- The claims left in a conflict set: its active members, but for `leaving`, a fact the calling
-- statement takes out of the set (an erasure still sees its own target). An open set hides its
-- members (docs/spec/context-assembler.md, "Hard filters") and needs two claims to stay open
-- (docs/spec/api.md, "Conflicts"): a set left with fewer resolves, as a retraction, a
-- supersession or an erasure leaves it (resolve_left_conflict_sets, erase_memory).
CREATE OR REPLACE FUNCTION public.haki_conflict_claims(
    p_project_id text, p_conflict_set_id uuid, leaving uuid
) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
-- Keeps a copy of open conflict: it counts the members of one set, whatever its status, for the
-- statement that decides it.
SELECT pg_catalog.count(*)
FROM public.conflict_members AS m
JOIN public.facts AS f ON f.project_id = m.project_id AND f.fact_id = m.fact_id
WHERE m.project_id = p_project_id
  AND m.conflict_set_id = p_conflict_set_id
  AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, NULL::timestamptz)
  AND f.fact_id IS DISTINCT FROM leaving
$$;
COMMENT ON FUNCTION public.haki_conflict_claims(text, uuid, uuid) IS
'Rule: the active members of a ConflictSet but one, of which a set needs two to stay open (docs/spec/api.md, "Conflicts"). Written and explained in migrations/rules.sql.';

-- 3. The hard filters ---------------------------------------------------------------------------

-- A fact the hard filters let through (docs/spec/context-assembler.md, "Hard filters"):
-- believed, valid, not stale. The scope and the open-conflict test stay in the caller's WHERE.
CREATE OR REPLACE FUNCTION public.haki_fact_servable(
    status text, valid_to timestamptz, volatility text, valid_from timestamptz,
    recorded_from timestamptz, stale_after interval, recorded_to timestamptz,
    believed_valid_to timestamptz, at timestamptz
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_fact_believed(status, recorded_from, recorded_to, at)
   AND public.haki_fact_valid(valid_to, recorded_to, believed_valid_to, at)
   AND NOT public.haki_fact_stale(volatility, valid_from, recorded_from, stale_after, at)
$$;
COMMENT ON FUNCTION public.haki_fact_servable(text, timestamptz, text, timestamptz, timestamptz, interval, timestamptz, timestamptz, timestamptz) IS
'Rule: a fact the hard filters let through at an instant (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';

-- The facts a hard filter hides, traced `blocked` (docs/spec/context-assembler.md, "Hard
-- filters"): `conflict_open` first, then `volatility_expired` for the rest. `open_members` is the
-- scope's haki_open_conflict_facts at `at`, which the calling statement has read once already
-- (migration 0034), tested as an array: read by primary key, never joined. Now is a branch of
-- its own (believed at a null instant) so it reads facts_scope_volatile_active under a generic plan.
CREATE OR REPLACE FUNCTION public.haki_blocked_facts(
    p_project_id text, p_subject_id text, open_members uuid[], at timestamptz
) RETURNS TABLE (fact_id uuid, reason_code text, tokens integer)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT f.fact_id, 'conflict_open', public.haki_tokens(f.content)
FROM public.facts AS f
WHERE f.project_id = p_project_id
  AND f.fact_id = ANY (open_members)
  AND f.subject_id = p_subject_id
  AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, at)
  AND public.haki_fact_valid(f.valid_to, f.recorded_to, f.believed_valid_to, at)
UNION ALL
SELECT f.fact_id, 'volatility_expired', public.haki_tokens(f.content)
FROM public.facts AS f
WHERE at IS NULL
  AND f.project_id = p_project_id
  AND f.subject_id = p_subject_id
  AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, NULL::timestamptz)
  AND public.haki_fact_valid(f.valid_to, f.recorded_to, f.believed_valid_to, at)
  AND public.haki_fact_stale(f.volatility, f.valid_from, f.recorded_from, f.stale_after, at)
  AND NOT (f.fact_id = ANY (open_members))
UNION ALL
SELECT f.fact_id, 'volatility_expired', public.haki_tokens(f.content)
FROM public.facts AS f
WHERE at IS NOT NULL
  AND f.project_id = p_project_id
  AND f.subject_id = p_subject_id
  AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, at)
  AND public.haki_fact_valid(f.valid_to, f.recorded_to, f.believed_valid_to, at)
  AND public.haki_fact_stale(f.volatility, f.valid_from, f.recorded_from, f.stale_after, at)
  AND NOT (f.fact_id = ANY (open_members))
$$;
COMMENT ON FUNCTION public.haki_blocked_facts(text, text, uuid[], timestamptz) IS
'Rule: the blocked facts of a scope at an instant, with their reason codes (docs/spec/context-assembler.md, "Hard filters"). Written and explained in migrations/rules.sql.';


-- 4. The score and the budget -------------------------------------------------------------------

-- The token estimate max(1, len(text) // 4) (docs/spec/context-assembler.md, "Token budget").
CREATE OR REPLACE FUNCTION public.haki_tokens(content text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT greatest(1, pg_catalog.char_length(content) / 4)
$$;
COMMENT ON FUNCTION public.haki_tokens(text) IS
'Rule: the token estimate (docs/spec/context-assembler.md, "Token budget"). Written and explained in migrations/rules.sql.';

-- The text rank of `facts_first`, normalised in [0, 1) by flag 32 (docs/spec/context-assembler.md,
-- "Hybrid score"); `real`, as ts_rank_cd returns, so the traces keep their values.
CREATE OR REPLACE FUNCTION public.haki_text_rank(sv tsvector, q tsquery) RETURNS real
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT pg_catalog.ts_rank_cd(sv, q, 32)
$$;
COMMENT ON FUNCTION public.haki_text_rank(tsvector, tsquery) IS
'Rule: the text rank of facts_first (docs/spec/context-assembler.md, "Hybrid score"). Written and explained in migrations/rules.sql.';

-- Recency exp(-Δt / τ) from the instant (docs/spec/context-assembler.md, "Hybrid score"). The
-- exponent stops at 700: exp() raises an underflow error near -745 (a memory 60 years old).
CREATE OR REPLACE FUNCTION public.haki_recency(
    dated_at timestamptz, tau_seconds double precision, at timestamptz
) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT least(1.0, pg_catalog.exp(-least(700.0,
    greatest(0.0, extract(epoch FROM coalesce(at, pg_catalog.now()) - dated_at)) / tau_seconds)))
$$;
COMMENT ON FUNCTION public.haki_recency(timestamptz, double precision, timestamptz) IS
'Rule: recency at an instant (docs/spec/context-assembler.md, "Hybrid score"). Written and explained in migrations/rules.sql.';

-- A fact's recency, dated by valid_from, else recorded_from (docs/spec/context-assembler.md,
-- "Hybrid score"); an episode's is haki_recency of occurred_at (context-profiles.md, "Rule 3").
CREATE OR REPLACE FUNCTION public.haki_fact_recency(
    valid_from timestamptz, recorded_from timestamptz, tau_seconds double precision, at timestamptz
) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT public.haki_recency(coalesce(valid_from, recorded_from), tau_seconds, at)
$$;
COMMENT ON FUNCTION public.haki_fact_recency(timestamptz, timestamptz, double precision, timestamptz) IS
'Rule: a fact''s recency at an instant (docs/spec/context-assembler.md, "Hybrid score"). Written and explained in migrations/rules.sql.';

-- The hybrid score (docs/spec/context-assembler.md, "Hybrid score"): similarity is 0 without a
-- query vector; weights are parameters (docs/spec/context-profiles.md, "Weights are not contract").
CREATE OR REPLACE FUNCTION public.haki_hybrid_score(
    cosine_distance double precision, text_rank double precision, recency double precision,
    w_similarity double precision, w_text_rank double precision, w_recency double precision
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT w_similarity * coalesce(1 - cosine_distance, 0) + w_text_rank * text_rank + w_recency * recency
$$;
COMMENT ON FUNCTION public.haki_hybrid_score(double precision, double precision, double precision, double precision, double precision, double precision) IS
'Rule: the hybrid score (docs/spec/context-assembler.md, "Hybrid score"). Written and explained in migrations/rules.sql.';


-- 5. The unified text side ----------------------------------------------------------------------

-- The search vector of a configuration (docs/spec/context-profiles.md, "Rule 1"). A constant
-- configuration folds to the one column, the one a scoped GIN index is built on.
CREATE OR REPLACE FUNCTION public.haki_text_vector(config regconfig, simple tsvector, english tsvector)
RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN config OPERATOR(pg_catalog.=) 'english'::regconfig THEN english ELSE simple END
$$;
COMMENT ON FUNCTION public.haki_text_vector(regconfig, tsvector, tsvector) IS
'Rule: the search vector of a text search configuration (docs/spec/context-profiles.md, "Rule 1"). Written and explained in migrations/rules.sql.';

-- The words the unified text side matches, in order, at most max_words, without stop words
-- (docs/spec/context-profiles.md, "Rule 1"); plainto_tsquery reads no operator in a word.
CREATE OR REPLACE FUNCTION public.haki_query_words(query text, config regconfig, max_words integer)
RETURNS TABLE (word text, word_query tsquery)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT u.lexeme, pg_catalog.plainto_tsquery('simple', u.lexeme)
FROM pg_catalog.unnest(pg_catalog.to_tsvector(config, query)) AS u(lexeme, positions, weights)
WHERE config OPERATOR(pg_catalog.<>) 'simple'::regconfig
   OR pg_catalog.to_tsvector('english', u.lexeme) OPERATOR(pg_catalog.<>) ''::tsvector
ORDER BY u.positions[1], u.lexeme
LIMIT max_words
$$;
COMMENT ON FUNCTION public.haki_query_words(text, regconfig, integer) IS
'Rule: the words of a query the unified text side matches (docs/spec/context-profiles.md, "Rule 1"). Written and explained in migrations/rules.sql.';

-- BM25's idf of a word found in df of docs texts (docs/spec/context-profiles.md, "Rule 1").
CREATE OR REPLACE FUNCTION public.haki_bm25_idf(docs bigint, df bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT pg_catalog.ln(1.0 + (greatest(docs, df) - df + 0.5) / (df + 0.5))
$$;
COMMENT ON FUNCTION public.haki_bm25_idf(bigint, bigint) IS
'Rule: BM25''s idf (docs/spec/context-profiles.md, "Rule 1"). Written and explained in migrations/rules.sql.';

-- The sample per-word statistics are counted on, so they never grow with the scope
-- (docs/spec/context-profiles.md, "Rule 1" and "Rule 5"): the newest facts believed and events
-- held at the instant, read backwards through facts_scope_id and events_scope_occurred_id.
CREATE OR REPLACE FUNCTION public.haki_scope_sample(
    p_project_id text, p_subject_id text, config regconfig, sample_docs integer, at timestamptz
) RETURNS TABLE (sv tsvector)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT fs.sv
FROM (
    SELECT public.haki_text_vector(config, f.search_vector, f.search_vector_english) AS sv
    FROM public.facts AS f
    WHERE f.project_id = p_project_id
      AND f.subject_id = p_subject_id
      AND public.haki_fact_believed(f.status, f.recorded_from, f.recorded_to, at)
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
      AND public.haki_event_held(e.occurred_at, e.recorded_at, at)
    -- Events of one instant by id, as haki_event_after orders them: never by where rows lie.
    ORDER BY e.occurred_at DESC, e.event_id DESC
    LIMIT sample_docs
) AS es
$$;
COMMENT ON FUNCTION public.haki_scope_sample(text, text, regconfig, integer, timestamptz) IS
'Rule: the sample of a scope that per-word statistics are counted on, at an instant (docs/spec/context-profiles.md, "Rule 1"). Written and explained in migrations/rules.sql.';

-- A query's words with the sample's size and each word's count in it, for haki_bm25_idf and the
-- share haki_text_probe reads (docs/spec/context-profiles.md, "Rule 1").
CREATE OR REPLACE FUNCTION public.haki_query_df(
    p_project_id text, p_subject_id text, query text, config regconfig, max_words integer,
    sample_docs integer, at timestamptz
) RETURNS TABLE (word text, word_query tsquery, docs bigint, df bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH words AS MATERIALIZED (
    SELECT w.word, w.word_query
    FROM public.haki_query_words(query, config, max_words) AS w
    WHERE pg_catalog.numnode(w.word_query) > 0
),
sample AS MATERIALIZED (
    SELECT s.sv
    FROM public.haki_scope_sample(p_project_id, p_subject_id, config, sample_docs, at) AS s
    WHERE EXISTS (SELECT 1 FROM words)
)
SELECT w.word, w.word_query, (SELECT count(*) FROM sample),
       (SELECT count(*) FROM sample AS s WHERE s.sv OPERATOR(pg_catalog.@@) w.word_query)
FROM words AS w
$$;
COMMENT ON FUNCTION public.haki_query_df(text, text, text, regconfig, integer, integer, timestamptz) IS
'Rule: the document frequencies of a query''s words over the scope''s sample (docs/spec/context-profiles.md, "Rule 1"). Written and explained in migrations/rules.sql.';

-- Whether a common word reads the scope's newest facts instead of its GIN postings
-- (docs/spec/context-profiles.md, "Rule 1"): GIN builds the word's bitmap whole (share * facts
-- postings), the newest facts yield the matches after match_limit / share rows (migration 0013).
CREATE OR REPLACE FUNCTION public.haki_text_probe(
    share double precision, facts double precision, match_limit integer, probe_rows integer,
    min_cost double precision, min_postings double precision
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT coalesce(share * share * facts >= min_cost
                AND share * facts >= min_postings
                AND share * probe_rows >= 2 * match_limit, false)
$$;
COMMENT ON FUNCTION public.haki_text_probe(double precision, double precision, integer, integer, double precision, double precision) IS
'Rule: whether a common word reads the scope''s newest facts instead of its postings (docs/spec/context-profiles.md, "Rule 1"). Written and explained in migrations/rules.sql.';
