-- Context Assembler statements (docs/spec/context-assembler.md). Every fact statement applies the
-- hard filters inside the query, before any scoring: status = 'active', the exact
-- (project_id, subject_id) scope, valid_to IS NULL OR valid_to > now(); servable facts also
-- sit in no open ConflictSet and are not stale volatile facts (those are reported as blocked).
-- The token estimate, recency (with its underflow guard), the hybrid score and the blocked facts
-- are SQL functions of migrations/rules.sql (haki_tokens, haki_recency, haki_hybrid_score,
-- haki_blocked_facts), inlined by the planner: each rule is written once. Each rule takes an
-- instant: `as_of` null is the current one (POST /v1/context without as_of, the plans of
-- before), otherwise the memory as it was then (docs/time-travel.md): facts believed
-- then (recorded_from, recorded_to), validity, staleness and recency at that instant, the
-- conflicts open then, the events held then.

-- name: open_context_call(ef_search, project_id, subject_id)$
-- The terms of one context call, for its transaction only, in one round trip, and the model the
-- project's vectors were made with (NULL before its first write), which the caller compares with
-- its embedder's before any retrieval (migration 0030):
-- - the scope's erasure lock, shared, until the transaction ends (lock_erasure_scope): an erasure
--   of the scope waits for the call's trace and then erases it, and a call waits for an erasure,
--   then retrieves in a snapshot taken after it. A null subject_id (a standby's retrieval, a
--   benchmark) takes none: the function is strict, so it is not called;
-- - the plan mode: HNSW may return K rows (ef_search defaults to 40) and keeps scanning past rows
--   that the scope filter rejects (iterative scan), and every statement of the call runs under
--   its generic plan. Each has one right plan for every scope (the walks by construction,
--   migration 0017), and planning them for each call's parameters cost more than running them
--   (the walk: 0.9-1.5 ms of planning for 1.5 ms of walking; fact_candidates: 1.0 ms for 2.5 ms;
--   the trace insert of 256 decisions: twice its cost; docs/performance.md);
-- - no durability choice: synchronous_commit stays on, so the commit of the call's trace waits
--   for the WAL flush and the trace is durable before the packet is returned
--   (docs/spec/context-profiles.md); turning it off here could lose traces of served packets.
SELECT (SELECT m.model FROM project_embedding_models AS m WHERE m.project_id = :project_id) AS embedding_model,
       set_config('hnsw.ef_search', :ef_search::integer::text, true) AS ef_search,
       set_config('hnsw.iterative_scan', 'relaxed_order', true) AS iterative_scan,
       set_config('plan_cache_mode', 'force_generic_plan', true) AS plan_cache_mode,
       pg_advisory_xact_lock_shared(hashtext(:project_id), hashtext(:subject_id)) AS scope_lock;

-- name: fact_candidates(project_id, subject_id, query_embedding, query_text, top_k, candidate_limit, exact_scan_min, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)^
-- Phase 1 (the vector top-K of haki_fact_walk UNION the top-K by full-text rank via GIN) and
-- phase 2 (the hybrid score on that union only, capped at CANDIDATE_LIMIT), plus the blocked
-- facts of the scope, in one round trip. Runs under a generic plan (open_context_call): every
-- scan in it has one right plan whatever the scope's size, the walk's included (an exact scan of
-- a small scope or a walk of its bucket's HNSW graph, decided when the call runs: migration
-- 0017). Never returns embeddings. A NULL query_embedding (embedder down) walks nothing and
-- leaves the full-text side alone. One row of parallel arrays: the candidates in score order and
-- the blocked facts.
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('simple', :query_text) AS tsq
),
open_members AS MATERIALIZED (
    -- The facts of the scope's open ConflictSets (migration 0010): the servable sides below
    -- exclude them, `blocked` reports them.
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id, :as_of::timestamptz) AS fact_ids
),
vector_walked AS MATERIALIZED (
    SELECT w.fact_id
    FROM public.haki_fact_walk(:project_id, :subject_id, :query_embedding::vector, :top_k::integer,
                               :exact_scan_min::integer, :as_of::timestamptz,
                               (SELECT om.fact_ids FROM open_members AS om)) AS w
),
text_top AS (
    -- The scope's postings only (haki_fact_postings, migration 0016: facts_scoped_search_gin).
    SELECT f.fact_id
    FROM q
    CROSS JOIN LATERAL public.haki_fact_postings(:project_id, :subject_id, 'simple'::regconfig, q.tsq,
                                                 :as_of::timestamptz) AS f
    WHERE NOT (f.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
    ORDER BY public.haki_text_rank(f.search_vector, q.tsq) DESC, f.fact_id
    LIMIT :top_k
),
candidate_ids AS MATERIALIZED (
    -- The union as one array, looked up by primary key below. Joined as a set, the generic plan
    -- (which cannot know LIMIT top_k) expected 1,000 ids and hashed a sequential scan of
    -- every fact of a 10,000-fact table against them: 2.9 ms for 64 rows.
    SELECT array_agg(c.fact_id) AS fact_ids
    FROM (
        SELECT fact_id FROM vector_walked
        UNION SELECT fact_id FROM text_top
    ) AS c
),
parts AS (
    SELECT f.fact_id, f.content, f.valid_from,
           public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, :as_of::timestamptz) AS valid_to,
           f.recorded_from, f.source_event_id,
           public.haki_tokens(f.content) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           public.haki_text_rank(f.search_vector, q.tsq) AS text_rank,
           public.haki_fact_recency(f.valid_from, f.recorded_from, :tau_seconds, :as_of::timestamptz) AS recency
    FROM facts AS f
    CROSS JOIN q
    WHERE f.project_id = :project_id
      AND f.fact_id = ANY ((SELECT c.fact_ids FROM candidate_ids AS c)::uuid[])
),
scored AS MATERIALIZED (
    -- Phase 2, in score order (`pos`), capped at CANDIDATE_LIMIT.
    SELECT row_number() OVER (ORDER BY t.score DESC, t.fact_id) AS pos, t.fact_id, t.content,
           t.valid_from, t.valid_to, t.recorded_from, t.source_event_id, t.tokens, t.cosine_distance,
           t.text_rank, t.recency, t.similarity, t.score
    FROM (
        SELECT p.fact_id, p.content, p.valid_from, p.valid_to, p.recorded_from, p.source_event_id,
               p.tokens, p.cosine_distance, p.text_rank, p.recency,
               1 - p.cosine_distance AS similarity,
               public.haki_hybrid_score(p.cosine_distance, p.text_rank, p.recency,
                                        :w_similarity, :w_text_rank, :w_recency) AS score
        FROM parts AS p
        ORDER BY score DESC, p.fact_id
        LIMIT :candidate_limit
    ) AS t
),
blocked AS MATERIALIZED (
    SELECT array_agg(b.fact_id) AS fact_ids, array_agg(b.reason_code) AS reason_codes,
           array_agg(b.tokens) AS tokens
    FROM open_members AS om
    CROSS JOIN public.haki_blocked_facts(:project_id, :subject_id, om.fact_ids, :as_of::timestamptz) AS b
)
SELECT array_agg(s.fact_id ORDER BY s.pos) AS item_ids,
       array_agg(s.content ORDER BY s.pos) AS contents, array_agg(s.tokens ORDER BY s.pos) AS tokens,
       array_agg(s.valid_from ORDER BY s.pos) AS valid_froms, array_agg(s.valid_to ORDER BY s.pos) AS valid_tos,
       array_agg(s.recorded_from ORDER BY s.pos) AS recorded_froms,
       array_agg(s.source_event_id ORDER BY s.pos) AS source_event_ids,
       array_agg(s.cosine_distance ORDER BY s.pos) AS cosine_distances,
       array_agg(s.similarity ORDER BY s.pos) AS similarities,
       array_agg(s.text_rank ORDER BY s.pos) AS text_ranks, array_agg(s.recency ORDER BY s.pos) AS recencies,
       array_agg(s.score ORDER BY s.pos) AS scores,
       (SELECT b.fact_ids FROM blocked AS b) AS blocked_ids,
       (SELECT b.reason_codes FROM blocked AS b) AS blocked_reasons,
       (SELECT b.tokens FROM blocked AS b) AS blocked_tokens
FROM scored AS s;

-- name: multi_hop_facts(project_id, subject_id, entities, exclude_ids, per_entity, match_limit, entity_sample_docs, probe_rows, probe_min_cost, probe_min_postings, query_embedding, query_text, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)
-- The `facts_first` multi-hop expansion: for each entity (in rank order) the top full-text
-- matches among the servable facts of the scope not yet decided, one hop, no new embedding.
-- The match step reads at most match_limit facts naming each entity, so a name that a million
-- facts carry costs as much as a rare one (docs/spec/context-profiles.md, "Multi-hop reads are
-- bounded"): from the scope's postings (facts_scoped_search_gin), or, for a name that many of a
-- big scope's facts carry, from the scope's newest servable facts (haki_entity_probes, migration
-- 0039: a GIN bitmap is built whole before LIMIT stops it). The per_entity best of those, by
-- ts_rank_cd, are the expansion. Score parts are those of the original query, for the trace.
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('simple', :query_text) AS tsq
),
e AS MATERIALIZED (
    SELECT p.entity, p.entity_rank, p.etsq, p.probe
    FROM public.haki_entity_probes(:project_id, :subject_id, :entities::text[], :entity_sample_docs,
                                   :match_limit, :probe_rows, :probe_min_cost, :probe_min_postings,
                                   :as_of::timestamptz) AS p
),
open_members AS MATERIALIZED (
    -- As in haki_fact_walk: the scope's open-conflict facts as one array (migration 0010).
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id, :as_of::timestamptz) AS fact_ids
),
picked AS MATERIALIZED (
    SELECT e.entity, e.entity_rank, p.fact_id
    FROM e
    -- A column, not a subquery, as the function's argument: a subplan would keep it from being
    -- inlined, and each read's LIMIT from stopping its scan.
    CROSS JOIN open_members AS om
    CROSS JOIN LATERAL (
        SELECT m.fact_id
        -- The match step (migration 0041): the postings, or the newest facts when probed.
        FROM public.haki_text_matches(:project_id, :subject_id, 'simple'::regconfig, e.etsq, e.probe,
                                      om.fact_ids || :exclude_ids::uuid[], :match_limit,
                                      :probe_rows, :as_of::timestamptz) AS m
        ORDER BY public.haki_text_rank(m.search_vector, e.etsq) DESC, m.fact_id
        LIMIT :per_entity
    ) AS p
),
hits AS (
    SELECT pk.entity, pk.entity_rank, f.fact_id, f.content, f.valid_from,
           public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, :as_of::timestamptz) AS valid_to,
           f.recorded_from, f.source_event_id,
           public.haki_tokens(f.content) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           public.haki_text_rank(f.search_vector, q.tsq) AS text_rank,
           public.haki_fact_recency(f.valid_from, f.recorded_from, :tau_seconds, :as_of::timestamptz) AS recency
    FROM picked AS pk
    JOIN facts AS f ON f.fact_id = pk.fact_id
    CROSS JOIN q
    -- At most per_entity ids an entity, looked up by primary key as one array: the generic plan
    -- cannot know LIMIT per_entity, and joined as a set it may hash a scan of every fact.
    WHERE f.project_id = :project_id
      AND f.fact_id = ANY ((SELECT array_agg(p.fact_id) FROM picked AS p)::uuid[])
)
SELECT h.entity, h.entity_rank, h.fact_id, h.content, h.valid_from, h.valid_to, h.recorded_from,
       h.source_event_id, h.tokens, h.cosine_distance, 1 - h.cosine_distance AS similarity,
       h.text_rank, h.recency,
       public.haki_hybrid_score(h.cosine_distance, h.text_rank, h.recency,
                                :w_similarity, :w_text_rank, :w_recency) AS score
FROM hits AS h
ORDER BY h.entity_rank, h.text_rank DESC, h.fact_id;

-- name: episode_candidates(project_id, subject_id, query_embedding, top_k, exact_scan_min, as_of)
-- Episodic memory: the EPISODE_TOP_K events of the scope closest to the query (haki_event_walk,
-- migration 0017: an exact scan of a small scope, the HNSW graph of its bucket otherwise),
-- closest first: the iterative scan runs in relaxed order, so the K rows are sorted again by
-- their exact distance. Never returns embeddings.
SELECT e.event_id, e.content, e.occurred_at,
       public.haki_tokens(e.content) AS tokens,
       (e.embedding <=> :query_embedding::vector) AS cosine_distance
FROM public.haki_event_walk(:project_id, :subject_id, :query_embedding::vector, :top_k::integer,
                            :exact_scan_min::integer, :as_of::timestamptz) AS w
JOIN events AS e ON e.project_id = :project_id AND e.event_id = w.event_id
ORDER BY cosine_distance, e.event_id;

-- name: unified_candidates(project_id, subject_id, query_embedding, query_text, text_config, event_top_k, exact_scan_min, top_k, candidate_limit, max_words, match_words, text_per_word, event_text_per_word, idf_sample_docs, probe_rows, probe_min_cost, probe_min_postings, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)^
-- The `unified` profile's phases 1 and 2 (docs/spec/context-profiles.md) in one round trip, from
-- the four pieces of migration 0029: the idf sample (haki_query_idf), the vector side
-- (haki_unified_walks), the text side (haki_unified_text_side: the OR of the query's rarest
-- words, in text_config) and the pool with its one hybrid score for facts and episodes, capped at
-- CANDIDATE_LIMIT together (haki_unified_pool). Reads are bounded whatever the scope's size.
-- Runs under a generic plan (open_context_call); never returns embeddings. One row of parallel
-- arrays: the candidates in score order, the blocked facts of the scope (haki_blocked_facts), the
-- query's words with their idf, so that linked_facts ranks texts alike without a second sample,
-- and the stand-ins of the episode candidates (haki_unified_stand_ins).
WITH idf AS MATERIALIZED (
    SELECT i.words, i.word_queries, i.idfs, i.shares, i.docs
    FROM public.haki_query_idf(:project_id, :subject_id, :query_text, :text_config::regconfig,
                               :max_words, :idf_sample_docs, :as_of::timestamptz) AS i
),
open_members AS MATERIALIZED (
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id, :as_of::timestamptz) AS fact_ids
),
found AS MATERIALIZED (
    -- Phase 1: what the vector side walked and what the text side matched, as ids.
    SELECT v.fact_ids AS walked_facts, v.event_ids AS walked_events, t.fact_ids AS matched_facts,
           t.event_ids AS matched_events
    FROM open_members AS om
    CROSS JOIN idf AS i
    CROSS JOIN public.haki_unified_walks(:project_id, :subject_id, :query_embedding::vector,
                                         :top_k::integer, :event_top_k::integer,
                                         :exact_scan_min::integer, om.fact_ids, :as_of::timestamptz) AS v
    CROSS JOIN public.haki_unified_text_side(:project_id, :subject_id, :text_config::regconfig, i.words,
                                             i.word_queries, i.idfs, i.shares, i.docs, :idf_sample_docs,
                                             :match_words, :text_per_word, :event_text_per_word,
                                             :probe_rows, :probe_min_cost, :probe_min_postings,
                                             om.fact_ids, :as_of::timestamptz) AS t
),
blocked AS MATERIALIZED (
    SELECT array_agg(b.fact_id) AS fact_ids, array_agg(b.reason_code) AS reason_codes,
           array_agg(b.tokens) AS tokens
    FROM open_members AS om
    CROSS JOIN public.haki_blocked_facts(:project_id, :subject_id, om.fact_ids, :as_of::timestamptz) AS b
)
SELECT s.item_types, s.item_ids, s.contents, s.tokens, s.valid_froms, s.valid_tos, s.recorded_froms,
       s.source_event_ids, s.occurred_ats, s.cosine_distances, s.similarities, s.text_ranks,
       s.recencies, s.scores, b.fact_ids AS blocked_ids, b.reason_codes AS blocked_reasons,
       b.tokens AS blocked_tokens, i.words, i.idfs, si.event_ids AS stand_in_events,
       si.fact_ids AS stand_in_ids, si.contents AS stand_in_contents, si.tokens AS stand_in_tokens,
       si.valid_froms AS stand_in_valid_froms, si.valid_tos AS stand_in_valid_tos,
       si.recorded_froms AS stand_in_recorded_froms,
       si.cosine_distances AS stand_in_cosine_distances, si.similarities AS stand_in_similarities,
       si.text_ranks AS stand_in_text_ranks, si.recencies AS stand_in_recencies,
       si.scores AS stand_in_scores
FROM found AS f
CROSS JOIN idf AS i
CROSS JOIN blocked AS b
CROSS JOIN open_members AS om
-- Phase 2: the pool and its score, as one row of arrays in score order.
CROSS JOIN public.haki_unified_pool(:project_id, :query_embedding::vector, :text_config::regconfig,
                                    f.walked_facts, f.walked_events, f.matched_facts, f.matched_events,
                                    i.word_queries, i.idfs, :top_k, :candidate_limit, :w_similarity,
                                    :w_text_rank, :w_recency, :tau_seconds, :as_of::timestamptz) AS s
-- The pool's episodes' stand-ins (rule 7, migration 0031), as parallel arrays keyed by event.
CROSS JOIN public.haki_unified_stand_ins(:project_id, :subject_id, s.item_types, s.item_ids,
                                         :query_embedding::vector, :text_config::regconfig,
                                         i.word_queries, i.idfs, om.fact_ids, :w_similarity,
                                         :w_text_rank, :w_recency, :tau_seconds,
                                         :as_of::timestamptz) AS si;

-- name: linked_facts(project_id, subject_id, entities, max_entities, per_entity, match_limit, entity_sample_docs, probe_rows, probe_min_cost, probe_min_postings, query_embedding, words, idfs, open_member_ids, text_config, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)
-- The `unified` profile's multi-hop expansion (docs/spec/context-profiles.md, rule 5): `entities`
-- come ranked by frequency among the kept facts. An entity that more than half of the scope's
-- sample texts name is dropped: its Robertson-Sparck Jones idf, log((N - df + 0.5) / (df + 0.5)),
-- is negative, so it tells nothing about a text (a speaker's name, "Yeah"). The first
-- max_entities of the rest each bring, from at most match_limit servable facts naming them
-- (the scope's postings), the per_entity closest to the query; one hop, no new embedding.
-- Candidates are not excluded: the assembler lifts them. Score parts are those of the original
-- query, as unified_candidates computes them (words and idfs: its 'word' rows), and its
-- open-conflict facts are skipped (open_member_ids). An entity that
-- many of a big scope's facts name reads its matches from the scope's newest facts, as a common
-- word does in unified_candidates, through the same match step. Never returns embeddings.
WITH informative AS MATERIALIZED (
    -- The entities, their frequency in the scope's sample and whether each is probed (migration
    -- 0039); the first max_entities that at most half of the sample names.
    SELECT p.entity, p.entity_rank, p.etsq, p.probe
    FROM public.haki_entity_probes(:project_id, :subject_id, :entities::text[], :entity_sample_docs,
                                   :match_limit, :probe_rows, :probe_min_cost, :probe_min_postings,
                                   :as_of::timestamptz) AS p
    WHERE 2 * p.df <= p.docs
    ORDER BY p.entity_rank
    LIMIT :max_entities
),
open_members AS MATERIALIZED (
    -- The scope's open-conflict facts as unified_candidates saw them (its blocked facts of
    -- reason conflict_open: the servable ones, and only servable facts are matched below), as
    -- one array: one snapshot's conflicts for the whole call, and no second reading of the sets
    -- (0.1-0.3 ms).
    SELECT :open_member_ids::uuid[] AS fact_ids
),
picked AS MATERIALIZED (
    SELECT i.entity, i.entity_rank, p.fact_id
    FROM informative AS i
    -- A column, not a subquery, as the function's argument (as in multi_hop_facts).
    CROSS JOIN open_members AS om
    CROSS JOIN LATERAL (
        SELECT m.fact_id
        -- The match step (migration 0041): the postings, or the newest facts when probed.
        FROM public.haki_text_matches(:project_id, :subject_id, 'simple'::regconfig, i.etsq, i.probe,
                                      om.fact_ids, :match_limit, :probe_rows, :as_of::timestamptz) AS m
        ORDER BY m.embedding <=> :query_embedding::vector, m.fact_id
        LIMIT :per_entity
    ) AS p
),
idf AS MATERIALIZED (
    SELECT plainto_tsquery('simple', u.word) AS word_query, u.idf
    FROM unnest(:words::text[], :idfs::float8[]) AS u(word, idf)
),
hits AS (
    SELECT pk.entity, pk.entity_rank, f.fact_id, f.content, f.valid_from,
           public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, :as_of::timestamptz) AS valid_to,
           f.recorded_from, f.source_event_id,
           public.haki_tokens(f.content) AS tokens,
           (f.embedding <=> :query_embedding::vector) AS cosine_distance,
           coalesce((SELECT sum(i.idf) FROM idf AS i
                     WHERE public.haki_text_vector(:text_config::regconfig, f.search_vector,
                                                   f.search_vector_english) @@ i.word_query)
                    / (SELECT nullif(sum(i.idf), 0) FROM idf AS i), 0) AS text_rank,
           public.haki_fact_recency(f.valid_from, f.recorded_from, :tau_seconds, :as_of::timestamptz) AS recency
    FROM picked AS pk
    JOIN facts AS f ON f.fact_id = pk.fact_id
    -- At most max_entities * per_entity ids, looked up by primary key as one array (as in
    -- multi_hop_facts).
    WHERE f.project_id = :project_id
      AND f.fact_id = ANY ((SELECT array_agg(p.fact_id) FROM picked AS p)::uuid[])
)
SELECT h.entity, h.entity_rank, h.fact_id, h.content, h.valid_from, h.valid_to, h.recorded_from,
       h.source_event_id, h.tokens, h.cosine_distance, 1 - h.cosine_distance AS similarity,
       h.text_rank, h.recency,
       public.haki_hybrid_score(h.cosine_distance, h.text_rank, h.recency,
                                :w_similarity, :w_text_rank, :w_recency) AS score
FROM hits AS h
ORDER BY h.entity_rank, h.cosine_distance, h.fact_id;

-- name: recheck_context_call(project_id, subject_id, fact_ids, as_of)^
-- What may have changed while a context call read, in a snapshot taken now (under read committed
-- each statement sees the commits made before it, so a later stage can meet what an earlier one
-- did not): how many of the facts it serves the hard filters would hide now (a rival, a
-- successor, a retraction, a new valid_to), and the project's embedding model, which a
-- re-embedding's switch changes with every vector. The call runs again when either moved, so a
-- packet shows one state of its scope, ranked in one vector space (service/db/call_runner.py).
-- The facts read by primary key, the open sets once (an initplan).
SELECT (SELECT count(*)
        FROM unnest(:fact_ids::uuid[]) AS t(fact_id)
        LEFT JOIN facts AS f
          ON f.project_id = :project_id AND f.subject_id = :subject_id AND f.fact_id = t.fact_id
        WHERE f.fact_id IS NULL
           OR NOT public.haki_fact_servable(f.status, f.valid_to, f.volatility, f.valid_from,
                                            f.recorded_from, f.stale_after, f.recorded_to,
                                            f.believed_valid_to, :as_of::timestamptz)
           OR t.fact_id = ANY ((SELECT public.haki_open_conflict_facts(:project_id, :subject_id,
                                                                       :as_of::timestamptz))::uuid[])
       ) AS unservable,
       (SELECT m.model FROM project_embedding_models AS m WHERE m.project_id = :project_id) AS embedding_model;
