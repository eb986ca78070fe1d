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

-- name: open_context_call(ef_search)$
-- The terms of one context call, for its transaction only, in one round trip:
-- - the plan mode: HNSW may return K rows (ef_search defaults to 40) and keeps scanning past rows
--   that the scope filter rejects (iterative scan), and every statement of the call runs under
--   its generic plan. Each has one right plan for every scope (the walks by construction,
--   migration 0017), and planning them for each call's parameters cost more than running them
--   (the walk: 0.9-1.5 ms of planning for 1.5 ms of walking; fact_candidates: 1.0 ms for 2.5 ms;
--   the trace insert of 256 decisions: twice its cost; docs/performance.md);
-- - the durability choice: the commit does not wait for the WAL flush. The call only writes its
--   trace, and an fsync per read call cost more than the retrieval itself; a crash can lose the
--   traces of the last few hundred ms, never corrupt them. Made here rather than in a statement
--   of its own before the trace write, where its round trip cost 0.37-0.49 ms a call.
SELECT set_config('hnsw.ef_search', :ef_search::integer::text, true) AS ef_search,
       set_config('hnsw.iterative_scan', 'relaxed_order', true) AS iterative_scan,
       set_config('plan_cache_mode', 'force_generic_plan', true) AS plan_cache_mode,
       set_config('synchronous_commit', 'off', true) AS synchronous_commit;

-- name: fact_candidates(project_id, subject_id, query_embedding, query_text, top_k, candidate_limit, exact_scan_min, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)
-- Phase 1 (the vector top-K of haki_fact_walk UNION the top-K by full-text rank via GIN) and
-- phase 2 (the hybrid score on that union only, capped at CANDIDATE_LIMIT), plus the blocked
-- facts of the scope, in one round trip. Runs under a generic plan (open_context_call): every
-- scan in it has one right plan whatever the scope's size, the walk's included (an exact scan of
-- a small scope or a walk of its bucket's HNSW graph, decided when the call runs: migration
-- 0017). Never returns embeddings. A NULL query_embedding (embedder down) walks nothing and
-- leaves the full-text side alone.
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
scored AS (
    SELECT p.fact_id, p.content, p.valid_from, p.valid_to, p.recorded_from, p.source_event_id,
           p.tokens, p.cosine_distance, p.text_rank, p.recency,
           1 - p.cosine_distance AS similarity,
           public.haki_hybrid_score(p.cosine_distance, p.text_rank, p.recency,
                                    :w_similarity, :w_text_rank, :w_recency) AS score
    FROM parts AS p
    ORDER BY score DESC, p.fact_id
    LIMIT :candidate_limit
),
blocked AS (
    SELECT b.fact_id, b.reason_code, b.tokens
    FROM public.haki_blocked_facts(:project_id, :subject_id, :as_of::timestamptz) AS b
)
SELECT 'candidate' AS kind, s.fact_id, s.content, s.valid_from, s.valid_to, s.recorded_from,
       s.source_event_id, s.tokens, s.cosine_distance, s.similarity, s.text_rank, s.recency, s.score,
       NULL::text AS reason_code, NULL::bigint AS blocked_total
FROM scored AS s
UNION ALL
SELECT 'blocked', b.fact_id, NULL, NULL, NULL, NULL, NULL, b.tokens, NULL, NULL, NULL, NULL, NULL,
       b.reason_code, count(*) OVER (PARTITION BY b.reason_code)
FROM blocked AS b;

-- name: multi_hop_facts(project_id, subject_id, entities, exclude_ids, per_entity, match_limit, query_embedding, query_text, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)
-- The `facts_first` multi-hop expansion: for each entity (in rank order) the top full-text
-- matches among the servable facts of the scope not yet decided, one hop, no new embedding.
-- The match step reads at most match_limit facts naming each entity from the scope's postings
-- (facts_scoped_search_gin), so a name that a million facts carry costs as much as a rare one
-- (docs/spec/context-profiles.md, "Multi-hop reads are bounded"); the per_entity best of those, by
-- ts_rank_cd, are the expansion. Score parts are those of the original query, for the trace.
WITH q AS MATERIALIZED (
    SELECT websearch_to_tsquery('simple', :query_text) AS tsq
),
e AS MATERIALIZED (
    SELECT u.entity, u.entity_rank, plainto_tsquery('simple', u.entity) AS etsq
    FROM unnest(:entities::text[]) WITH ORDINALITY AS u(entity, entity_rank)
),
open_members AS MATERIALIZED (
    -- As in haki_fact_walk: the scope's open-conflict facts as one array (migration 0010).
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id, :as_of::timestamptz) AS fact_ids
),
picked AS MATERIALIZED (
    SELECT e.entity, e.entity_rank, p.fact_id
    FROM e
    CROSS JOIN LATERAL (
        SELECT m.fact_id
        FROM (
            -- As text_top of fact_candidates: the scope's postings (migration 0016).
            SELECT f.fact_id, f.search_vector
            FROM public.haki_fact_postings(:project_id, :subject_id, 'simple'::regconfig, e.etsq,
                                           :as_of::timestamptz) AS f
            WHERE NOT (f.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
              AND NOT (f.fact_id = ANY(:exclude_ids::uuid[]))
            LIMIT :match_limit
        ) AS m
        ORDER BY public.haki_text_rank(m.search_vector, e.etsq) DESC, m.fact_id
        LIMIT :per_entity
    ) AS p
    WHERE numnode(e.etsq) > 0
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

-- name: insert_context_trace(project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status, warnings, empty_reason, facts_served, episodes_served, include_episodes, recall_max_distance, text_search_config, weights, as_of, replay_of, decisions)!
-- Persists one context call and every decision of it in one round trip: one INSERT of the call,
-- one INSERT ... SELECT of the decisions, sent as one JSON array of Decision objects (encoding
-- eleven parallel arrays cost the client twice the time; docs/performance.md). The decisions of
-- a call at the current instant are `counted` in what each fact is worth (migration 0012);
-- those of an as-of call or a replay are not. The call keeps the text search configuration and
-- the weights it ranked with, which a replay uses (migration 0019).
WITH call AS (
    INSERT INTO context_calls (
        project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status,
        warnings, empty_reason, facts_served, episodes_served, include_episodes,
        recall_max_distance, text_search_config, weights, as_of, replay_of
    )
    VALUES (
        :project_id, :trace_id, :subject_id, :query, :profile, :budget_tokens, :used_tokens, :status,
        :warnings::text[], :empty_reason, :facts_served, :episodes_served, :include_episodes,
        :recall_max_distance, :text_search_config, :weights::float8[], :as_of::timestamptz,
        :replay_of::uuid
    )
    RETURNING project_id, trace_id, as_of IS NULL AND replay_of IS NULL AS counted
)
INSERT INTO context_traces (
    project_id, trace_id, ord, item_type, item_id, decision, reason_code, rank, score,
    similarity, text_rank, recency, cosine_distance, tokens, counted
)
SELECT call.project_id, call.trace_id, t.ord, t.item_type, t.item_id, t.decision, t.reason_code,
       t.rank, t.score, t.similarity, t.text_rank, t.recency, t.cosine_distance, t.tokens,
       call.counted
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
-- One logged context call of a project (GET /v1/inspect/{trace_id}, and what a replay rebuilds).
SELECT trace_id, project_id, subject_id, query, profile, created_at, budget_tokens, used_tokens,
       status, warnings, empty_reason, include_episodes, recall_max_distance, text_search_config,
       weights, as_of, replay_of
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

-- name: unified_candidates(project_id, subject_id, query_embedding, query_text, text_config, event_top_k, exact_scan_min, top_k, candidate_limit, max_words, match_words, text_per_word, event_text_per_word, idf_sample_docs, probe_rows, probe_min_cost, probe_min_postings, w_similarity, w_text_rank, w_recency, tau_seconds, as_of)
-- The `unified` profile's phases 1 and 2 (docs/spec/context-profiles.md): fact and episode
-- candidates, each the vector top-K (haki_fact_walk, and haki_event_walk for event_top_k > 0:
-- migration 0017) UNION the top-K by text rank, scored by one
-- hybrid formula (an episode's recency from occurred_at) and capped at CANDIDATE_LIMIT
-- together, plus the blocked facts of the scope, in one round trip. The text side matches the
-- OR of the query's words (haki_query_words, in text_config: `english` stems or `simple`
-- lexemes, without stop words) and ranks a text by the share of the query's BM25 idf it
-- matches: sum(idf(matched)) / sum(idf(query)). Runs under a generic plan (open_context_call).
-- Never returns embeddings. Reads are bounded whatever the scope's size: the document
-- frequencies come from a sample of the scope's newest idf_sample_docs facts and as many events
-- (exact up to that size), and the match_words rarest words (highest idf: a text that matches
-- none of them can only rank low) each read at most text_per_word postings of facts and
-- event_text_per_word of events (0: no episode candidates). A word that many of a big scope's
-- facts name reads its matches from the scope's newest facts (at most probe_rows of them)
-- instead of its GIN postings, whose bitmap would be built whole (haki_text_probe, migration
-- 0013). Rows of kind 'word' carry the query's words (content) and their idf (score).
WITH idf AS MATERIALIZED (
    SELECT d.word, d.word_query, public.haki_bm25_idf(d.docs, d.df) AS idf,
           d.df::double precision / nullif(d.docs, 0) AS share, d.docs
    FROM public.haki_query_df(:project_id, :subject_id, :query_text, :text_config::regconfig,
                              :max_words, :idf_sample_docs, :as_of::timestamptz) AS d
),
scope_facts AS MATERIALIZED (
    -- The scope's size (planner statistics), read only when a word is common enough to need it
    -- and the sample is full (a smaller sample holds every fact of the scope: migration 0021).
    SELECT public.haki_probe_scope_facts(:project_id, :subject_id, (SELECT max(w.share) FROM idf AS w),
                                         (SELECT max(w.docs) FROM idf AS w), :idf_sample_docs,
                                         :text_per_word, :probe_rows, :probe_min_cost,
                                         :probe_min_postings) AS facts
),
idf_total AS MATERIALIZED (
    -- The idf of all the query's words, and any of them as one tsquery: a text that holds none
    -- (most of the vector side's) has text rank 0 without a test per word.
    SELECT nullif(sum(i.idf), 0) AS total,
           string_agg('(' || i.word_query::text || ')', ' | ')::tsquery AS any_word
    FROM idf AS i
),
open_members AS MATERIALIZED (
    -- As in haki_fact_walk: the scope's open-conflict facts as one array (migration 0010).
    SELECT public.haki_open_conflict_facts(:project_id, :subject_id, :as_of::timestamptz) AS fact_ids
),
walked AS MATERIALIZED (
    -- Phase 1, vector side: the ids of the top_k closest servable facts and of the event_top_k
    -- closest events of the scope (none for a NULL query_embedding).
    SELECT ARRAY(
               SELECT w.fact_id
               FROM public.haki_fact_walk(:project_id, :subject_id, :query_embedding::vector,
                                          :top_k::integer, :exact_scan_min::integer,
                                          :as_of::timestamptz,
                                          (SELECT om.fact_ids FROM open_members AS om)) AS w
           ) AS fact_ids,
           ARRAY(
               SELECT w.event_id
               FROM public.haki_event_walk(:project_id, :subject_id, :query_embedding::vector,
                                           :event_top_k::integer, :exact_scan_min::integer,
                                           :as_of::timestamptz) AS w
               WHERE :event_top_k::integer > 0
           ) AS event_ids
),
rare AS MATERIALIZED (
    -- The match_words rarest words, each with the probe rule's choice (haki_text_probe).
    SELECT w.word_query,
           public.haki_text_probe(w.share, (SELECT sf.facts FROM scope_facts AS sf),
                                  :text_per_word, :probe_rows, :probe_min_cost,
                                  :probe_min_postings) AS probe
    FROM idf AS w
    ORDER BY w.idf DESC, w.word
    LIMIT :match_words
),
posting_hits AS MATERIALIZED (
    -- Per rare word, at most text_per_word servable facts from the scope's postings in
    -- text_config (haki_fact_postings, migration 0016: one GIN index a configuration, each arm
    -- naming its own), as whole rows: the pool takes them as they are, where reading them again
    -- by primary key cost 0.28 ms of the statement's 10 at 10k.
    SELECT DISTINCT ON (f.fact_id) f.fact_id, f.content, f.valid_from, f.valid_to, f.recorded_to,
           f.believed_valid_to, f.recorded_from, f.source_event_id, f.embedding, f.search_vector,
           f.search_vector_english
    FROM rare AS i
    CROSS JOIN LATERAL (
        SELECT p.fact_id, p.content, p.valid_from, p.valid_to, p.recorded_to,
               p.believed_valid_to, p.recorded_from, p.source_event_id, p.embedding,
               p.search_vector, p.search_vector_english
        FROM (SELECT e.fact_id, e.content, e.valid_from, e.valid_to, e.recorded_to,
                     e.believed_valid_to, e.recorded_from, e.source_event_id, e.embedding,
                     e.search_vector, e.search_vector_english
              FROM public.haki_fact_postings(:project_id, :subject_id, 'english'::regconfig,
                                             i.word_query, :as_of::timestamptz) AS e
              WHERE :text_config::regconfig = 'english'::regconfig
              UNION ALL
              SELECT s.fact_id, s.content, s.valid_from, s.valid_to, s.recorded_to,
                     s.believed_valid_to, s.recorded_from, s.source_event_id, s.embedding,
                     s.search_vector, s.search_vector_english
              FROM public.haki_fact_postings(:project_id, :subject_id, 'simple'::regconfig,
                                             i.word_query, :as_of::timestamptz) AS s
              WHERE :text_config::regconfig <> 'english'::regconfig) AS p
        WHERE NOT i.probe
          AND NOT (p.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
        LIMIT :text_per_word
    ) AS f
    ORDER BY f.fact_id
),
probe_hits AS MATERIALIZED (
    -- For a word the probe rule picks, at most text_per_word matches among the scope's newest
    -- servable facts (haki_newest_servable_facts, migration 0013), as ids.
    SELECT coalesce(array_agg(DISTINCT h.fact_id), '{}'::uuid[]) AS ids
    FROM rare AS i
    CROSS JOIN LATERAL (
        SELECT n.fact_id
        FROM public.haki_newest_servable_facts(i.probe, :project_id, :subject_id,
                                               :as_of::timestamptz, :probe_rows) AS n
        WHERE public.haki_text_vector(:text_config::regconfig, n.search_vector,
                                      n.search_vector_english) @@ i.word_query
          AND NOT (n.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
        LIMIT :text_per_word
    ) AS h
),
posted AS MATERIALIZED (
    SELECT ARRAY(SELECT h.fact_id FROM posting_hits AS h) AS ids
),
event_hits AS MATERIALIZED (
    -- The same for events, from their scope's postings (haki_event_postings_for, migration 0016).
    SELECT coalesce(array_agg(DISTINCT h.event_id), '{}'::uuid[]) AS ids
    FROM rare AS i
    CROSS JOIN LATERAL (
        SELECT e.event_id
        FROM public.haki_event_postings_for(:project_id, :subject_id, :text_config::regconfig,
                                            i.word_query, :as_of::timestamptz) AS e
        LIMIT :event_text_per_word
    ) AS h
),
pool AS (
    -- Every walked or matched item, read once: the postings' facts as they came, the rest by
    -- primary key (ids as arrays: a generic plan joining them as a set may hash a scan of the
    -- whole table, and before the first ANALYZE ran a by-array scan again for each row of a set
    -- it expected to hold one: 94 ms), with every part of its score. Reading the candidates a
    -- second time for their content cost 1.7 ms of the statement's 6.2 on the benchmark world.
    SELECT p.item_type, p.item_id, p.content, p.valid_from, p.valid_to, p.recorded_from,
           p.source_event_id, p.occurred_at, p.tokens, p.cosine_distance, p.recency, p.walked, p.hit,
           CASE WHEN p.sv @@ (SELECT t.any_word FROM idf_total AS t)
                THEN coalesce((SELECT sum(i.idf) FROM idf AS i WHERE p.sv @@ i.word_query)
                              / (SELECT t.total FROM idf_total AS t), 0)
                ELSE 0
           END AS text_rank
    FROM (
        SELECT 'fact' AS item_type, f.fact_id AS item_id, f.content, f.valid_from,
               public.haki_valid_to_at(f.valid_to, f.recorded_to, f.believed_valid_to, :as_of::timestamptz) AS valid_to,
               f.recorded_from, f.source_event_id, NULL::timestamptz AS occurred_at,
               public.haki_tokens(f.content) AS tokens,
               (f.embedding <=> :query_embedding::vector) AS cosine_distance,
               public.haki_fact_recency(f.valid_from, f.recorded_from, :tau_seconds, :as_of::timestamptz) AS recency,
               public.haki_text_vector(:text_config::regconfig, f.search_vector, f.search_vector_english) AS sv,
               f.fact_id = ANY ((SELECT w.fact_ids FROM walked AS w)::uuid[]) AS walked,
               f.hit
        FROM (
            SELECT h.fact_id, h.content, h.valid_from, h.valid_to, h.recorded_to, h.believed_valid_to,
                   h.recorded_from, h.source_event_id, h.embedding, h.search_vector,
                   h.search_vector_english, true AS hit
            FROM posting_hits AS h
            UNION ALL
            -- The walked and probed facts the postings did not bring, by primary key.
            SELECT r.fact_id, r.content, r.valid_from, r.valid_to, r.recorded_to, r.believed_valid_to,
                   r.recorded_from, r.source_event_id, r.embedding, r.search_vector,
                   r.search_vector_english, r.fact_id = ANY ((SELECT ph.ids FROM probe_hits AS ph)::uuid[])
            FROM facts AS r
            WHERE r.project_id = :project_id
              AND r.fact_id = ANY ((SELECT w.fact_ids FROM walked AS w)::uuid[] || (SELECT ph.ids FROM probe_hits AS ph)::uuid[])
              AND NOT (r.fact_id = ANY ((SELECT pd.ids FROM posted AS pd)::uuid[]))
        ) AS f
        UNION ALL
        SELECT 'episode', e.event_id, e.content, NULL, NULL, NULL, NULL, e.occurred_at,
               public.haki_tokens(e.content),
               (e.embedding <=> :query_embedding::vector),
               public.haki_recency(e.occurred_at, :tau_seconds, :as_of::timestamptz),
               public.haki_text_vector(:text_config::regconfig, e.search_vector, e.search_vector_english),
               e.event_id = ANY ((SELECT w.event_ids FROM walked AS w)::uuid[]),
               e.event_id = ANY ((SELECT h.ids FROM event_hits AS h)::uuid[])
        FROM events AS e
        WHERE e.project_id = :project_id
          AND e.event_id = ANY ((SELECT w.event_ids FROM walked AS w)::uuid[] || (SELECT h.ids FROM event_hits AS h)::uuid[])
    ) AS p
),
kept AS (
    -- Phase 1: the vector top-K UNION the top-K by text rank, of each kind.
    SELECT r.item_type, r.item_id, r.content, r.valid_from, r.valid_to, r.recorded_from,
           r.source_event_id, r.occurred_at, r.tokens, r.cosine_distance, r.text_rank, r.recency
    FROM (
        SELECT p.item_type, p.item_id, p.content, p.valid_from, p.valid_to, p.recorded_from,
               p.source_event_id, p.occurred_at, p.tokens, p.cosine_distance, p.text_rank,
               p.recency, p.walked, p.hit,
               row_number() OVER (PARTITION BY p.item_type, p.hit
                                  ORDER BY p.text_rank DESC, p.item_id) AS text_pos
        FROM pool AS p
    ) AS r
    WHERE r.walked OR (r.hit AND r.text_pos <= :top_k)
),
scored AS (
    -- Phase 2: one hybrid score for facts and episodes, capped at CANDIDATE_LIMIT together.
    SELECT p.item_type, p.item_id, p.content, p.valid_from, p.valid_to, p.recorded_from,
           p.source_event_id, p.occurred_at, p.tokens, p.cosine_distance, p.text_rank, p.recency,
           1 - p.cosine_distance AS similarity,
           public.haki_hybrid_score(p.cosine_distance, p.text_rank, p.recency,
                                    :w_similarity, :w_text_rank, :w_recency) AS score
    FROM kept AS p
    -- Ties: facts first (the cheaper representation of a turn), then by id.
    ORDER BY score DESC, p.item_type = 'episode', p.item_id
    LIMIT :candidate_limit
)
SELECT 'candidate' AS kind, s.item_type, s.item_id, s.content, s.valid_from, s.valid_to,
       s.recorded_from, s.source_event_id, s.occurred_at, s.tokens, s.cosine_distance,
       s.similarity, s.text_rank, s.recency, s.score,
       NULL::text AS reason_code, NULL::bigint AS blocked_total
FROM scored AS s
UNION ALL
SELECT 'blocked', 'fact', b.fact_id, NULL, NULL, NULL, NULL, NULL, NULL, b.tokens, NULL, NULL,
       NULL, NULL, NULL, b.reason_code, count(*) OVER (PARTITION BY b.reason_code)
FROM public.haki_blocked_facts(:project_id, :subject_id, :as_of::timestamptz) AS b
UNION ALL
-- The query's words and their idf, so that linked_facts ranks texts alike without a second sample.
SELECT 'word', NULL, NULL, i.word, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       i.idf, NULL, NULL
FROM idf AS i;

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
-- word does in unified_candidates. Never returns embeddings.
WITH e AS MATERIALIZED (
    SELECT u.entity, u.entity_rank, plainto_tsquery('simple', u.entity) AS etsq
    FROM unnest(:entities::text[]) WITH ORDINALITY AS u(entity, entity_rank)
),
names AS MATERIALIZED (
    -- Entities are names, matched as written: the `simple` vectors of the scope's sample.
    SELECT s.sv
    FROM public.haki_scope_sample(:project_id, :subject_id, 'simple'::regconfig, :entity_sample_docs,
                                   :as_of::timestamptz) AS s
    WHERE EXISTS (SELECT 1 FROM e)
),
counted AS MATERIALIZED (
    -- Each entity's document frequency in the sample, counted once: computed in the same SELECT
    -- as the share, the count ran twice (the planner copies a subquery into each use; 0.05 ms
    -- of the statement's 2.1 on the benchmark world, eight entities).
    SELECT e.entity, e.entity_rank, e.etsq,
           (SELECT count(*) FROM names AS n WHERE n.sv @@ e.etsq) AS df,
           (SELECT count(*) FROM names) AS docs
    FROM e
    WHERE numnode(e.etsq) > 0
),
named AS MATERIALIZED (
    SELECT c.entity, c.entity_rank, c.etsq, c.df, c.docs,
           c.df::double precision / nullif(c.docs, 0) AS share
    FROM counted AS c
),
scope_facts AS MATERIALIZED (
    -- As in unified_candidates: the scope's size, only when an entity is common enough and
    -- the entity sample is full.
    SELECT public.haki_probe_scope_facts(:project_id, :subject_id, (SELECT max(n.share) FROM named AS n),
                                         (SELECT max(n.docs) FROM named AS n), :entity_sample_docs,
                                         :match_limit, :probe_rows, :probe_min_cost,
                                         :probe_min_postings) AS facts
),
informative AS MATERIALIZED (
    SELECT n.entity, n.entity_rank, n.etsq,
           public.haki_text_probe(n.share, (SELECT sf.facts FROM scope_facts AS sf), :match_limit,
                                  :probe_rows, :probe_min_cost, :probe_min_postings) AS probe
    FROM named AS n
    WHERE 2 * n.df <= n.docs
    ORDER BY n.entity_rank
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
    CROSS JOIN LATERAL (
        SELECT m.fact_id
        FROM (
            (SELECT f.fact_id, f.embedding
             -- As text_top of fact_candidates: the scope's postings (migration 0016).
             FROM public.haki_fact_postings(:project_id, :subject_id, 'simple'::regconfig, i.etsq,
                                            :as_of::timestamptz) AS f
             WHERE NOT i.probe
               AND NOT (f.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
             LIMIT :match_limit)
            UNION ALL
            (SELECT n.fact_id, n.embedding
             -- The probe, as in unified_candidates: the scope's newest servable facts.
             FROM public.haki_newest_servable_facts(i.probe, :project_id, :subject_id,
                                                    :as_of::timestamptz, :probe_rows) AS n
             WHERE n.search_vector @@ i.etsq
               AND NOT (n.fact_id = ANY ((SELECT om.fact_ids FROM open_members AS om)::uuid[]))
             LIMIT :match_limit)
        ) AS m
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

-- name: stats_facts(project_id, subject_id, order_by, page_size)
-- What the active facts of a project (or one subject) are worth (GET /v1/stats/facts), from the
-- counted decisions of the traces (haki_fact_usage, migration 0012): `never_served` lists the
-- facts never served, the most often left out first; `most_served` the most served first;
-- `most_dropped` the most often left out for the budget first. Reads every counted decision of
-- the scope's facts (index-only on context_traces_fact_usage).
SELECT f.fact_id, f.subject_id, f.content, f.key, u.served_count, u.last_served_at,
       u.excluded_count, u.over_budget_count
FROM facts AS f
CROSS JOIN LATERAL public.haki_fact_usage(f.project_id, f.fact_id) AS u
WHERE f.project_id = :project_id
  AND (:subject_id::text IS NULL OR f.subject_id = :subject_id)
  AND f.status = 'active'
  AND (:order_by::text <> 'never_served' OR u.served_count = 0)
ORDER BY CASE :order_by::text
             WHEN 'most_served' THEN u.served_count
             WHEN 'most_dropped' THEN u.over_budget_count
             ELSE u.excluded_count
         END DESC,
         f.fact_id
LIMIT :page_size;
