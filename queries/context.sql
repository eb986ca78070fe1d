-- Context Assembler statements (spec/context-assembler.md). Every fact statement applies the
-- hard filters inside the query, before any scoring: status = 'active', the exact
-- (project_id, subject_id) scope, valid_to IS NULL OR valid_to > now(); servable facts also
-- sit in no open ConflictSet and are not stale volatile facts (those are reported as blocked).
-- Recency is exp(-least(700, age / tau)): PostgreSQL's exp() raises an underflow error below
-- ~exp(-745), which a memory older than ~60 years reached, failing every call of its scope.

-- name: configure_vector_scan(ef_search)$
-- For this transaction (one context call) only: let HNSW return K rows (ef_search defaults to
-- 40) and keep scanning past rows that the scope filter rejects (iterative scan). Plan the
-- vector walks for their own parameters: a generic plan can name no partial index (the bucket
-- is a parameter), does not know LIMIT K, and exact-scanned every scope. Commit without
-- waiting for the WAL flush: the call only writes its trace, and an fsync per read call cost
-- more than the retrieval itself; a crash can lose the traces of the last few hundred ms,
-- never corrupt them (docs/performance.md).
SELECT set_config('hnsw.ef_search', :ef_search::integer::text, true) AS ef_search,
       set_config('hnsw.iterative_scan', 'relaxed_order', true) AS iterative_scan,
       set_config('plan_cache_mode', 'force_custom_plan', true) AS plan_cache_mode,
       set_config('synchronous_commit', 'off', true) AS synchronous_commit;

-- name: end_custom_plans()!
-- After the vector walks, generic plans for the rest of the call: fact_candidates, multi-hop
-- and the trace insert have one right plan for every scope, and planning them for each call's
-- parameters cost more than running them (fact_candidates: 1.0 ms of planning for 2.5 ms of
-- execution; the trace insert of 256 decisions: twice its cost; docs/performance.md).
SET LOCAL plan_cache_mode TO force_generic_plan;

-- name: vector_walk(project_id, subject_id, query_embedding, top_k, exact_scan_min)$
-- Phase 1, vector side: the ids of the top-K servable facts of the scope by cosine distance,
-- from an exact scan of a small scope or a walk of its bucket's HNSW graph. Runs on its own,
-- planned for its parameters (configure_vector_scan): its right plan depends on the scope's
-- size, and fact_candidates, which has one right plan for every scope, keeps a generic one.
-- A NULL query_embedding walks nothing.
WITH open_members AS MATERIALIZED (
    -- The facts of the scope's open ConflictSets (migration 0010), as one array: tested on each
    -- walked row, it is cheaper than the anti-join the planner picks for the few rows it
    -- expects from an index walk (a nested loop over the set, 0.24 ms at 10k).
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id) AS fact_ids
),
exact_scan AS MATERIALIZED (
    -- The vector side's strategy. A scope-filtered walk of the scope's bucket (migration 0008)
    -- reads about top_k / selectivity index tuples (~6 us each), an exact scan every fact of
    -- the scope (~1.2 us each), so the exact scan is cheaper below sqrt(5 * top_k * bucket
    -- rows) facts: 1,460 in a 106k-fact table, 4,500 in a 1M-fact one (docs/performance.md).
    -- The planner's HNSW cost ignores the iterative scan, so it cannot make this choice itself.
    -- The test reads the scope's ids up to the threshold, in index order (index-only on
    -- facts_scope_id), and asks whether one more exists.
    SELECT NOT EXISTS (
        SELECT 1
        FROM facts AS f
        WHERE f.project_id = :project_id
          AND f.subject_id = :subject_id
        ORDER BY f.fact_id
        OFFSET (SELECT greatest(:exact_scan_min::integer,
                                sqrt(5.0 * :top_k * greatest(c.reltuples, 0) / public.haki_scope_buckets()))::bigint
                FROM pg_class AS c
                WHERE c.oid = 'facts'::regclass) - 1
    ) AS small
),
vector_exact AS (
    SELECT d.fact_id
    FROM (
        SELECT f.fact_id, f.embedding <=> :query_embedding::vector AS distance
        FROM facts AS f
        WHERE (SELECT x.small FROM exact_scan AS x)
          AND :query_embedding::vector IS NOT NULL
          AND f.project_id = :project_id
          AND f.subject_id = :subject_id
          AND f.status = 'active'
          AND (f.valid_to IS NULL OR f.valid_to > now())
          AND NOT (f.volatility = 'volatile'
                   AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now())
          AND NOT (f.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
        OFFSET 0  -- computed distances, sorted below: never the HNSW ordering
    ) AS d
    ORDER BY d.distance, d.fact_id
    LIMIT :top_k
),
walk AS (
    SELECT f.fact_id
    FROM facts AS f
    WHERE NOT (SELECT x.small FROM exact_scan AS x)
      AND :query_embedding::vector IS NOT NULL
      -- The scope's bucket: the planner walks that bucket's partial HNSW index (0008).
      AND public.haki_scope_bucket(f.project_id, f.subject_id) = public.haki_scope_bucket(:project_id, :subject_id)
      AND f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND NOT (f.volatility = 'volatile'
               AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now())
      AND NOT (f.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
    -- The expression of the bucket indexes (half precision): the walk's order, not the score.
    ORDER BY f.embedding::halfvec(384) <=> :query_embedding::vector::halfvec(384)
    LIMIT :top_k
)
SELECT coalesce(array_agg(v.fact_id), '{}'::uuid[]) AS walked_ids
FROM (
    SELECT fact_id FROM vector_exact
    UNION ALL
    SELECT fact_id FROM walk
) AS v;

-- name: fact_candidates(project_id, subject_id, query_embedding, query_text, top_k, candidate_limit, walked_ids, w_similarity, w_text_rank, w_recency, tau_seconds)
-- Phase 1 (the vector top-K of vector_walk UNION the top-K by full-text rank via GIN) and phase
-- 2 (the hybrid score on that union only, capped at CANDIDATE_LIMIT), plus the blocked facts of
-- the scope, in one round trip. Runs under a generic plan (end_custom_plans): every scan in it
-- has one right plan whatever the scope's size. Never returns embeddings. A NULL
-- query_embedding (embedder down) leaves the full-text side alone.
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('simple', :query_text) AS tsq
),
open_members AS MATERIALIZED (
    -- The facts of the scope's open ConflictSets (migration 0010): the servable sides below
    -- exclude them, `blocked` reports them.
    SELECT u.fact_id FROM unnest(public.haki_open_conflict_facts(:project_id, :subject_id)) AS u(fact_id)
),
vector_walked AS (
    SELECT w.fact_id FROM unnest(:walked_ids::uuid[]) AS w(fact_id)
),
text_top AS (
    SELECT f.fact_id
    FROM facts AS f, q
    -- The scope's postings only (facts_scoped_search_gin, migration 0009). The scope test is
    -- written so no B-tree matches it: the planner ANDed the GIN bitmap with one of every fact
    -- of the scope from facts_scope_id, which the scope lexeme already does (0.7 ms at 10k).
    WHERE (f.project_id = :project_id AND f.subject_id = :subject_id) IS TRUE
      AND public.haki_scoped_search_vector(f.project_id, f.subject_id, f.search_vector)
          @@ (q.tsq && public.haki_scope_lexeme(:project_id, :subject_id)::tsquery)
      AND f.search_vector @@ q.tsq
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND NOT (f.volatility = 'volatile'
               AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now())
      AND NOT EXISTS (SELECT 1 FROM open_members AS om WHERE om.fact_id = f.fact_id)
    ORDER BY ts_rank_cd(f.search_vector, q.tsq, 32) DESC, f.fact_id
    LIMIT :top_k
),
candidate_ids AS MATERIALIZED (
    -- The union as one array, looked up by primary key below. Joined as a set, the generic plan
    -- (which cannot know LIMIT :top_k) expected 1,000 ids and hashed a sequential scan of
    -- every fact of a 10,000-fact table against them: 2.9 ms for 64 rows.
    SELECT array_agg(c.fact_id) AS fact_ids
    FROM (
        SELECT fact_id FROM vector_walked
        UNION SELECT fact_id FROM text_top
    ) AS c
),
parts AS (
    SELECT f.fact_id, f.content, f.valid_from, f.valid_to, f.recorded_from, f.source_event_id,
           greatest(1, char_length(f.content) / 4) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           ts_rank_cd(f.search_vector, q.tsq, 32) AS text_rank,
           least(1.0, exp(-least(700.0, greatest(0.0, extract(epoch FROM now() - coalesce(f.valid_from, f.recorded_from)))
                          / :tau_seconds::float8))) AS recency
    FROM facts AS f
    CROSS JOIN q
    WHERE f.project_id = :project_id
      AND f.fact_id = ANY ((SELECT c.fact_ids FROM candidate_ids AS c)::uuid[])
),
scored AS (
    SELECT p.fact_id, p.content, p.valid_from, p.valid_to, p.recorded_from, p.source_event_id,
           p.tokens, p.cosine_distance, p.text_rank, p.recency,
           1 - p.cosine_distance AS similarity,
           :w_similarity::float8 * coalesce(1 - p.cosine_distance, 0)
           + :w_text_rank::float8 * p.text_rank
           + :w_recency::float8 * p.recency AS score
    FROM parts AS p
    ORDER BY score DESC, p.fact_id
    LIMIT :candidate_limit
),
blocked AS (
    SELECT f.fact_id, 'conflict_open' AS reason_code, greatest(1, char_length(f.content) / 4) AS tokens
    FROM open_members AS om
    JOIN facts AS f ON f.project_id = :project_id AND f.fact_id = om.fact_id
    WHERE f.subject_id = :subject_id
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
    UNION ALL
    -- Stale volatile facts not already blocked by a conflict (partial index of migration 0005).
    SELECT f.fact_id, 'volatility_expired', greatest(1, char_length(f.content) / 4)
    FROM facts AS f
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.status = 'active'
      AND f.volatility = 'volatile'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now()
      AND NOT EXISTS (SELECT 1 FROM open_members AS om WHERE om.fact_id = f.fact_id)
)
SELECT 'candidate' AS kind, s.fact_id, s.content, s.valid_from, s.valid_to, s.recorded_from,
       s.source_event_id, s.tokens, s.cosine_distance, s.similarity, s.text_rank, s.recency, s.score,
       NULL::text AS reason_code, NULL::bigint AS blocked_total
FROM scored AS s
UNION ALL
SELECT 'blocked', b.fact_id, NULL, NULL, NULL, NULL, NULL, b.tokens, NULL, NULL, NULL, NULL, NULL,
       b.reason_code, count(*) OVER (PARTITION BY b.reason_code)
FROM blocked AS b;

-- name: multi_hop_facts(project_id, subject_id, entities, exclude_ids, per_entity, query_embedding, query_text, w_similarity, w_text_rank, w_recency, tau_seconds)
-- Multi-hop expansion: for each entity (in rank order) the top full-text matches among the
-- servable facts of the scope not yet decided, one hop, no new embedding. Score parts are
-- those of the original query, for the trace. One pass over the scope's postings
-- (facts_scoped_search_gin) finds the facts naming any entity; each entity then ranks its own
-- among those.
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('simple', :query_text) AS tsq
),
e AS MATERIALIZED (
    SELECT u.entity, u.entity_rank, plainto_tsquery('simple', u.entity) AS etsq
    FROM unnest(:entities::text[]) WITH ORDINALITY AS u(entity, entity_rank)
),
any_entity AS MATERIALIZED (
    SELECT string_agg(e.etsq::text, ' | ')::tsquery AS tsq
    FROM e
    WHERE numnode(e.etsq) > 0
),
open_members AS MATERIALIZED (
    -- As in vector_walk: the scope's open-conflict facts as one array (migration 0010).
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id) AS fact_ids
),
matches AS MATERIALIZED (
    SELECT f.fact_id, f.search_vector
    FROM facts AS f, any_entity AS a
    -- As text_top of fact_candidates: the scope's postings, and no bitmap of the whole scope.
    WHERE (f.project_id = :project_id AND f.subject_id = :subject_id) IS TRUE
      AND public.haki_scoped_search_vector(f.project_id, f.subject_id, f.search_vector)
          @@ (a.tsq && public.haki_scope_lexeme(:project_id, :subject_id)::tsquery)
      AND f.search_vector @@ a.tsq
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND NOT (f.volatility = 'volatile'
               AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now())
      AND NOT (f.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
      AND NOT (f.fact_id = ANY(:exclude_ids::uuid[]))
),
picked AS MATERIALIZED (
    SELECT e.entity, e.entity_rank, p.fact_id
    FROM e
    CROSS JOIN LATERAL (
        SELECT m.fact_id
        FROM matches AS m
        WHERE m.search_vector @@ e.etsq
        ORDER BY ts_rank_cd(m.search_vector, e.etsq, 32) DESC, m.fact_id
        LIMIT :per_entity
    ) AS p
),
hits AS (
    SELECT pk.entity, pk.entity_rank, f.fact_id, f.content, f.valid_from, f.valid_to,
           f.recorded_from, f.source_event_id,
           greatest(1, char_length(f.content) / 4) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           ts_rank_cd(f.search_vector, q.tsq, 32) AS text_rank,
           least(1.0, exp(-least(700.0, greatest(0.0, extract(epoch FROM now() - coalesce(f.valid_from, f.recorded_from)))
                          / :tau_seconds::float8))) AS recency
    FROM picked AS pk
    JOIN facts AS f ON f.fact_id = pk.fact_id
    CROSS JOIN q
    -- At most per_entity ids an entity, looked up by primary key as one array: the generic plan
    -- cannot know LIMIT :per_entity, and joined as a set it may hash a scan of every fact.
    WHERE f.project_id = :project_id
      AND f.fact_id = ANY ((SELECT array_agg(p.fact_id) FROM picked AS p)::uuid[])
)
SELECT h.entity, h.entity_rank, h.fact_id, h.content, h.valid_from, h.valid_to, h.recorded_from,
       h.source_event_id, h.tokens, h.cosine_distance, 1 - h.cosine_distance AS similarity,
       h.text_rank, h.recency,
       :w_similarity::float8 * coalesce(1 - h.cosine_distance, 0)
       + :w_text_rank::float8 * h.text_rank
       + :w_recency::float8 * h.recency AS score
FROM hits AS h
ORDER BY h.entity_rank, h.text_rank DESC, h.fact_id;

-- name: episode_candidates(project_id, subject_id, query_embedding, top_k)
-- Episodic memory: the EPISODE_TOP_K events of the scope closest to the query (the HNSW index
-- of the scope's bucket, migration 0008), closest first: the iterative scan runs in relaxed
-- order, so the K rows are sorted again by their exact distance. Never returns embeddings.
SELECT k.event_id, k.content, k.occurred_at, k.tokens, k.cosine_distance
FROM (
    SELECT e.event_id, e.content, e.occurred_at,
           greatest(1, char_length(e.content) / 4) AS tokens,
           (e.embedding <=> :query_embedding::vector) AS cosine_distance
    FROM events AS e
    WHERE public.haki_scope_bucket(e.project_id, e.subject_id) = public.haki_scope_bucket(:project_id, :subject_id)
      AND e.project_id = :project_id
      AND e.subject_id = :subject_id
    ORDER BY e.embedding <=> :query_embedding::vector
    LIMIT :top_k
) AS k
ORDER BY k.cosine_distance, k.event_id;

-- name: insert_context_trace(project_id, trace_id, subject_id, query, budget_tokens, used_tokens, status, warnings, empty_reason, facts_served, episodes_served, decisions)!
-- Persists one context call and every decision of it in one round trip: one INSERT of the call,
-- one INSERT ... SELECT of the decisions, sent as one JSON array of Decision objects (encoding
-- eleven parallel arrays cost the client twice the time; docs/performance.md).
WITH call AS (
    INSERT INTO context_calls (
        project_id, trace_id, subject_id, query, budget_tokens, used_tokens, status, warnings,
        empty_reason, facts_served, episodes_served
    )
    VALUES (
        :project_id, :trace_id, :subject_id, :query, :budget_tokens, :used_tokens, :status,
        :warnings::text[], :empty_reason, :facts_served, :episodes_served
    )
    RETURNING project_id, trace_id
)
INSERT INTO context_traces (
    project_id, trace_id, ord, item_type, item_id, decision, reason_code, rank, score,
    similarity, text_rank, recency, cosine_distance, tokens
)
SELECT call.project_id, call.trace_id, t.ord, t.item_type, t.item_id, t.decision, t.reason_code,
       t.rank, t.score, t.similarity, t.text_rank, t.recency, t.cosine_distance, t.tokens
FROM call
CROSS JOIN ROWS FROM (
    json_to_recordset(:decisions::json) AS (
        item_type text, item_id uuid, decision text, reason_code text, rank integer,
        score float8, similarity float8, text_rank float8, recency float8,
        cosine_distance float8, tokens integer
    )
) WITH ORDINALITY AS t(item_type, item_id, decision, reason_code, rank, score, similarity,
                       text_rank, recency, cosine_distance, tokens, ord);

-- name: get_context_call(project_id, trace_id)^
-- One logged context call of a project (GET /v1/inspect/{trace_id}).
SELECT trace_id, project_id, subject_id, query, created_at, budget_tokens, used_tokens, status,
       warnings, empty_reason
FROM context_calls
WHERE project_id = :project_id
  AND trace_id = :trace_id;

-- name: list_context_decisions(project_id, trace_id)
-- Every decision of one context call, in the order the assembler made them.
SELECT item_type, item_id, decision, reason_code, rank, score, similarity, text_rank, recency,
       cosine_distance, tokens
FROM context_traces
WHERE project_id = :project_id
  AND trace_id = :trace_id
ORDER BY ord;

-- name: stats_overview(project_id)^
-- Usage overview of a project, computed over the call log and the memory tables.
SELECT :project_id::text AS project_id,
       calls.context_calls,
       calls.injection_rate,
       calls.injection_rate AS hit_rate,
       calls.avg_used_tokens,
       calls.degraded_rate,
       fs.facts_active,
       fs.facts_total,
       ev.events_total,
       oc.open_conflicts
FROM (
    SELECT count(*) AS context_calls,
           coalesce(avg((c.facts_served > 0)::int), 0)::float8 AS injection_rate,
           coalesce(avg(c.used_tokens), 0)::float8 AS avg_used_tokens,
           coalesce(avg((c.status = 'degraded')::int), 0)::float8 AS degraded_rate
    FROM context_calls AS c
    WHERE c.project_id = :project_id
) AS calls
CROSS JOIN (
    SELECT count(*) FILTER (WHERE f.status = 'active') AS facts_active, count(*) AS facts_total
    FROM facts AS f
    WHERE f.project_id = :project_id
) AS fs
CROSS JOIN (
    SELECT count(*) AS events_total
    FROM events AS e
    WHERE e.project_id = :project_id
) AS ev
CROSS JOIN (
    SELECT count(*) AS open_conflicts
    FROM conflict_sets AS cs
    WHERE cs.project_id = :project_id
      AND cs.status = 'open'
) AS oc;

-- name: proposal_candidates(project_id, subject_id, query_embedding, query_text, text_mode, with_episodes, episode_text, top_k, candidate_limit, w_similarity, w_text_rank, w_recency, tau_seconds)
-- EVALUATION ONLY: the retrieval proposals P1-P3 of docs/quality.md, reached only through
-- assemble(proposal=...) by benchmarks/locomo.py, never through the HTTP API; the shipped
-- path is fact_candidates above. Same hard filters and blocked rows as fact_candidates; then:
-- - text_mode 'websearch': the spec's websearch_to_tsquery('simple', query) and ts_rank_cd;
--   'any' (P1a): the OR of the query's words minus English stop words, ranked by ts_rank_cd;
--   'idf' (P1b): the same OR query for matching, ranked by the share of the query's IDF that a
--   text matches, sum(idf(matched words)) / sum(idf(query words)), with the BM25 idf
--   ln(1 + (N - df + 0.5) / (df + 0.5)) over the scope's active facts and events;
-- - with_episodes (P2): events are candidates too (top-K by cosine), scored with the same
--   formula (recency from occurred_at), so facts and episodes share one ranking;
-- - episode_text (P3): plus the top-K events by the text rank.
-- Events have no search_vector yet (P3 adds one in a migration, with a GIN index), so this
-- evaluation parses the scope's events once per call (event_docs): slower, same ranking.
-- Never returns embeddings.
WITH words AS MATERIALIZED (
    SELECT DISTINCT w.word, plainto_tsquery('simple', w.word) AS wq
    FROM unnest(tsvector_to_array(to_tsvector('simple', :query_text))) AS w(word)
    WHERE to_tsvector('english', w.word) <> ''::tsvector
),
q AS MATERIALIZED (
    SELECT CASE WHEN :text_mode::text = 'websearch' THEN websearch_to_tsquery('simple', :query_text)
                ELSE (SELECT websearch_to_tsquery('simple', coalesce(string_agg(word, ' or '), ''))
                      FROM words)
           END AS tsq
),
event_docs AS MATERIALIZED (
    SELECT ev.event_id, to_tsvector('simple', ev.content) AS sv
    FROM events AS ev
    WHERE (:text_mode::text = 'idf' OR (:with_episodes::boolean AND :episode_text::boolean))
      AND ev.project_id = :project_id
      AND ev.subject_id = :subject_id
),
corpus AS MATERIALIZED (
    SELECT (SELECT count(*) FROM facts AS f
            WHERE f.project_id = :project_id AND f.subject_id = :subject_id AND f.status = 'active')
         + (SELECT count(*) FROM event_docs) AS docs
),
idf AS MATERIALIZED (
    SELECT w.word, w.wq,
           ln(1 + (c.docs - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM words AS w
    CROSS JOIN corpus AS c
    CROSS JOIN LATERAL (
        SELECT (SELECT count(*) FROM facts AS f
                WHERE f.project_id = :project_id AND f.subject_id = :subject_id
                  AND f.status = 'active' AND f.search_vector @@ w.wq)
             + (SELECT count(*) FROM event_docs AS e WHERE e.sv @@ w.wq) AS df
    ) AS d
    WHERE :text_mode::text = 'idf'
),
idf_total AS MATERIALIZED (
    SELECT nullif(sum(idf), 0) AS total FROM idf
),
fact_vector_top AS (
    SELECT f.fact_id
    FROM facts AS f
    WHERE :query_embedding::vector IS NOT NULL
      AND f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND NOT (f.volatility = 'volatile'
               AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now())
      AND NOT EXISTS (
          SELECT 1
          FROM conflict_members AS cm
          JOIN conflict_sets AS cs
            ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
          WHERE cm.project_id = f.project_id AND cm.fact_id = f.fact_id AND cs.status = 'open'
      )
    ORDER BY f.embedding <=> :query_embedding::vector
    LIMIT :top_k
),
fact_text AS (
    SELECT f.fact_id,
           coalesce(CASE WHEN :text_mode::text = 'idf'
                         THEN ((SELECT sum(i.idf) FROM idf AS i WHERE f.search_vector @@ i.wq)
                               / (SELECT total FROM idf_total))::float8
                         ELSE ts_rank_cd(f.search_vector, q.tsq, 32)::float8
                    END, 0) AS text_rank
    FROM facts AS f, q
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.search_vector @@ q.tsq
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND NOT (f.volatility = 'volatile'
               AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now())
      AND NOT EXISTS (
          SELECT 1
          FROM conflict_members AS cm
          JOIN conflict_sets AS cs
            ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
          WHERE cm.project_id = f.project_id AND cm.fact_id = f.fact_id AND cs.status = 'open'
      )
),
fact_text_top AS (
    SELECT t.fact_id FROM fact_text AS t ORDER BY t.text_rank DESC, t.fact_id LIMIT :top_k
),
event_vector_top AS (
    SELECT e.event_id
    FROM events AS e
    WHERE :with_episodes::boolean
      AND :query_embedding::vector IS NOT NULL
      AND e.project_id = :project_id
      AND e.subject_id = :subject_id
    ORDER BY e.embedding <=> :query_embedding::vector
    LIMIT :top_k
),
event_text AS (
    SELECT e.event_id,
           coalesce(CASE WHEN :text_mode::text = 'idf'
                         THEN ((SELECT sum(i.idf) FROM idf AS i WHERE e.sv @@ i.wq)
                               / (SELECT total FROM idf_total))::float8
                         ELSE ts_rank_cd(e.sv, q.tsq, 32)::float8
                    END, 0) AS text_rank
    FROM event_docs AS e, q
    WHERE :with_episodes::boolean
      AND :episode_text::boolean
      AND e.sv @@ q.tsq
),
event_text_top AS (
    SELECT t.event_id FROM event_text AS t ORDER BY t.text_rank DESC, t.event_id LIMIT :top_k
),
parts AS (
    SELECT 'fact' AS item_type, f.fact_id AS item_id, f.content, f.valid_from, f.valid_to,
           f.recorded_from, f.source_event_id, NULL::timestamptz AS occurred_at,
           greatest(1, char_length(f.content) / 4) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           coalesce(ft.text_rank, 0) AS text_rank,
           least(1.0, exp(-least(700.0, greatest(0.0, extract(epoch FROM now() - coalesce(f.valid_from, f.recorded_from)))
                          / :tau_seconds::float8))) AS recency
    FROM (SELECT fact_id FROM fact_vector_top UNION SELECT fact_id FROM fact_text_top) AS c
    JOIN facts AS f ON f.project_id = :project_id AND f.fact_id = c.fact_id
    LEFT JOIN fact_text AS ft ON ft.fact_id = c.fact_id
    UNION ALL
    SELECT 'episode', e.event_id, e.content, NULL, NULL, NULL, NULL, e.occurred_at,
           greatest(1, char_length(e.content) / 4),
           (e.embedding <=> :query_embedding::vector),
           coalesce(et.text_rank, 0),
           least(1.0, exp(-least(700.0, greatest(0.0, extract(epoch FROM now() - e.occurred_at)) / :tau_seconds::float8)))
    FROM (SELECT event_id FROM event_vector_top UNION SELECT event_id FROM event_text_top) AS c
    JOIN events AS e ON e.project_id = :project_id AND e.event_id = c.event_id
    LEFT JOIN event_text AS et ON et.event_id = c.event_id
),
scored AS (
    SELECT p.item_type, p.item_id, p.content, p.valid_from, p.valid_to, p.recorded_from,
           p.source_event_id, p.occurred_at, p.tokens, p.cosine_distance, p.text_rank, p.recency,
           1 - p.cosine_distance AS similarity,
           :w_similarity::float8 * coalesce(1 - p.cosine_distance, 0)
           + :w_text_rank::float8 * p.text_rank
           + :w_recency::float8 * p.recency AS score
    FROM parts AS p
    ORDER BY score DESC, p.item_type, p.item_id
    LIMIT :candidate_limit
),
blocked AS (
    SELECT f.fact_id,
           CASE WHEN oc.open THEN 'conflict_open' ELSE 'volatility_expired' END AS reason_code,
           greatest(1, char_length(f.content) / 4) AS tokens
    FROM facts AS f
    CROSS JOIN LATERAL (
        SELECT EXISTS (
            SELECT 1
            FROM conflict_members AS cm
            JOIN conflict_sets AS cs
              ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
            WHERE cm.project_id = f.project_id AND cm.fact_id = f.fact_id AND cs.status = 'open'
        ) AS open
    ) AS oc
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
      AND f.status = 'active'
      AND (f.valid_to IS NULL OR f.valid_to > now())
      AND (oc.open
           OR (f.volatility = 'volatile'
               AND coalesce(f.valid_from, f.recorded_from) + f.stale_after <= now()))
)
SELECT 'candidate' AS kind, s.item_type, s.item_id, s.content, s.valid_from, s.valid_to,
       s.recorded_from, s.source_event_id, s.occurred_at, s.tokens, s.cosine_distance,
       s.similarity, s.text_rank, s.recency, s.score,
       NULL::text AS reason_code, NULL::bigint AS blocked_total
FROM scored AS s
UNION ALL
SELECT 'blocked', 'fact', b.fact_id, NULL, NULL, NULL, NULL, NULL, NULL, b.tokens, NULL, NULL,
       NULL, NULL, NULL, b.reason_code, count(*) OVER (PARTITION BY b.reason_code)
FROM blocked AS b;
