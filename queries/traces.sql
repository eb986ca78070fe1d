-- The trace of context calls (docs/spec/context-profiles.md, "The trace is durable before the
-- packet is returned"): its write, and what reads it (GET /v1/inspect, replay, /ui, the
-- statistics). One row of context_calls per call holds its decisions as parallel arrays
-- (migration 0026: codes from haki_trace_codes, scores and similarities stored only where they
-- differ from the derived ones, haki_trace_score and haki_trace_similarity); calls traced before
-- keep theirs in context_traces, which haki_trace_decisions and haki_fact_usage read beside the
-- new form until they age out.

-- name: list_trace_codes()
-- The codes of a decision and the part of the arrays each is stored in (haki_trace_codes, the
-- one mapping), read once by the process that writes traces (insert_context_trace).
SELECT k.code, k.item_type, k.decision, k.reason_code, k.part
FROM public.haki_trace_codes() AS k
ORDER BY k.code;

-- name: insert_context_trace(project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status, warnings, empty_reason, facts_served, episodes_served, include_episodes, recall_max_distance, text_search_config, weights, as_of, replay_of, item_ids, positions, positions_wide, codes, ranks, tokens, cosine_distances, text_ranks, recencies, scores, similarities, served, over_budget, below_floor)!
-- Persists one context call with every decision of it, one row in one round trip. The client
-- sends the decisions as the row's parallel arrays, already coded and grouped by part
-- (list_trace_codes), so the server parses no JSON and sorts nothing (docs/performance.md,
-- "Trace storage"); an unknown decision comes as a NULL code, which
-- context_calls_decision_codes_known refuses. Here only the scores and similarities are
-- compared with the derived ones, to store the exceptions alone. The call keeps the text search
-- configuration and the weights it ranked with, which a replay uses (migration 0019); its
-- decisions count in what each fact is worth when it was made at the current instant and is no
-- replay (the partial indexes of migration 0026). A call of more decisions than a smallint
-- counts sends its positions as positions_wide instead (migration 0043).
INSERT INTO context_calls (
    project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status,
    warnings, empty_reason, facts_served, episodes_served, include_episodes,
    recall_max_distance, text_search_config, weights, as_of, replay_of,
    decision_ids, decision_positions, decision_positions_wide, decision_codes, decision_ranks,
    decision_tokens, decision_distances, decision_text_ranks, decision_recencies, decision_scores,
    decision_similarities, decision_served, decision_over_budget, decision_below_floor
)
SELECT :project_id, :trace_id, :subject_id, :query, :profile, :budget_tokens, :used_tokens, :status,
       :warnings::text[], :empty_reason, :facts_served, :episodes_served, :include_episodes,
       :recall_max_distance, :text_search_config, :weights::float8[], :as_of::timestamptz,
       :replay_of::uuid,
       :item_ids::uuid[], :positions::smallint[], :positions_wide::integer[], :codes::smallint[],
       :ranks::smallint[],
       :tokens::smallint[], :cosine_distances::float8[], :text_ranks::float8[], :recencies::float8[],
       -- No exception (the common case): no array at all.
       CASE WHEN bool_or(e.score IS NOT NULL) THEN array_agg(e.score ORDER BY e.i) END,
       CASE WHEN bool_or(e.similarity IS NOT NULL) THEN array_agg(e.similarity ORDER BY e.i) END,
       :served, :over_budget, :below_floor
FROM (
    SELECT u.i,
           public.haki_trace_exception(
               u.score, public.haki_trace_score(u.distance, u.text_rank, u.recency, :weights::float8[])
           ) AS score,
           public.haki_trace_exception(u.similarity, public.haki_trace_similarity(u.distance))
               AS similarity
    FROM unnest(:scores::float8[], :similarities::float8[], :cosine_distances::float8[],
                :text_ranks::float8[], :recencies::float8[])
         WITH ORDINALITY AS u(score, similarity, distance, text_rank, recency, i)
) AS e;

-- name: count_erased_trace_items(project_id, subject_id, item_ids)$
-- How many of the items a call's decisions name are no longer a fact or an event of its scope:
-- erased since its retrieval read them on a standby (or before, on a standby behind). Its trace
-- is not written then, and the call runs again on the primary (service/db/call_runner.py).
SELECT count(*) AS erased
FROM unnest(:item_ids::uuid[]) AS t(item_id)
LEFT JOIN facts AS f
  ON f.project_id = :project_id AND f.subject_id = :subject_id AND f.fact_id = t.item_id
LEFT JOIN events AS e
  ON e.project_id = :project_id AND e.subject_id = :subject_id AND e.event_id = t.item_id
WHERE f.fact_id IS NULL
  AND e.event_id IS NULL;

-- name: get_context_call(project_id, trace_id)^
-- One logged context call of a project (GET /v1/inspect/{trace_id}, and what a replay rebuilds).
SELECT trace_id, project_id, subject_id, query, profile, created_at, budget_tokens, used_tokens,
       status, warnings, empty_reason, include_episodes, recall_max_distance, text_search_config,
       weights, as_of, replay_of
FROM context_calls
WHERE project_id = :project_id
  AND trace_id = :trace_id;

-- name: get_inspection(project_id, trace_id)^
-- One logged context call with its decisions (GET /v1/inspect, replay), one row: the compact
-- arrays as stored (grouped by part; decision_positions is the assembler's order), score and
-- similarity derived where none is stored, as haki_trace_decisions derives them, and the code
-- mapping (haki_trace_codes) as four arrays. A row per decision would cost the read twice the
-- time (docs/performance.md, "Trace storage"). A call traced before migration 0026 has NULL
-- item_ids; its decisions are read with list_context_decisions.
SELECT c.trace_id, c.project_id, c.subject_id, c.query, c.profile, c.created_at, c.budget_tokens,
       c.used_tokens, c.status, c.warnings, c.empty_reason, c.include_episodes,
       c.recall_max_distance, c.text_search_config, c.weights, c.as_of, c.replay_of,
       coalesce(c.decision_positions_wide, c.decision_positions::integer[]) AS positions,
       c.decision_codes AS codes, c.decision_ids AS item_ids,
       c.decision_ranks AS ranks, c.decision_tokens AS tokens,
       c.decision_distances AS cosine_distances, c.decision_text_ranks AS text_ranks,
       c.decision_recencies AS recencies,
       ARRAY(SELECT public.haki_trace_value(u.score, public.haki_trace_score(u.distance, u.text_rank,
                                                                             u.recency, c.weights))
             FROM unnest(c.decision_scores, c.decision_distances, c.decision_text_ranks,
                         c.decision_recencies) WITH ORDINALITY AS u(score, distance, text_rank, recency, i)
             ORDER BY u.i) AS scores,
       ARRAY(SELECT public.haki_trace_value(u.similarity, public.haki_trace_similarity(u.distance))
             FROM unnest(c.decision_similarities, c.decision_distances)
                  WITH ORDINALITY AS u(similarity, distance, i)
             ORDER BY u.i) AS similarities,
       k.codes AS known_codes, k.item_types AS known_item_types, k.decisions AS known_decisions,
       k.reason_codes AS known_reason_codes
FROM context_calls AS c
CROSS JOIN (
    SELECT array_agg(k.code) AS codes, array_agg(k.item_type) AS item_types,
           array_agg(k.decision) AS decisions, array_agg(k.reason_code) AS reason_codes
    FROM public.haki_trace_codes() AS k
) AS k
WHERE c.project_id = :project_id
  AND c.trace_id = :trace_id;

-- name: list_context_decisions(project_id, trace_id)
-- Every decision of one context call, in the order the assembler made them, from either form
-- (haki_trace_decisions, migration 0026): a call traced before the compact form (get_inspection).
SELECT d.item_type, d.item_id, d.decision, d.reason_code, d.rank, d.score, d.similarity,
       d.text_rank, d.recency, d.cosine_distance, d.tokens
FROM public.haki_trace_decisions(:project_id, :trace_id) AS d
ORDER BY d.ord;

-- name: list_trace_items(project_id, trace_id)
-- Every decision of one context call in assembler order, with the text of the fact or event it
-- is about (NULL if that item is gone), for the trace inspector pages (/ui/traces).
SELECT d.ord, d.item_type, d.item_id, d.decision, d.reason_code, d.rank, d.score, d.similarity,
       d.text_rank, d.recency, d.cosine_distance, d.tokens,
       coalesce(f.content, e.content) AS content,
       f.status AS fact_status,
       e.occurred_at
FROM public.haki_trace_decisions(:project_id, :trace_id) AS d
LEFT JOIN facts AS f
  ON d.item_type = 'fact' AND f.project_id = :project_id AND f.fact_id = d.item_id
LEFT JOIN events AS e
  ON d.item_type = 'episode' AND e.project_id = :project_id AND e.event_id = d.item_id
ORDER BY d.ord;

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
      -- The agents' own calls: as-of calls and replays are traced but not counted as usage,
      -- as in what each fact is worth (docs/time-travel.md).
      AND c.as_of IS NULL
      AND c.replay_of IS NULL
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

-- name: stats_facts(project_id, subject_id, order_by, page_size)
-- What the active facts of a project (or one subject) are worth (GET /v1/stats/facts), from the
-- counted decisions of the traces (haki_fact_usage, migrations 0012 and 0026): `never_served`
-- lists the facts never served, the most often left out first; `most_served` the most served
-- first; `most_dropped` the most often left out for the budget first. Each fact is three probes of
-- the GIN indexes on the calls' counted fact ids, plus one of context_traces_fact_usage for calls
-- traced before migration 0026.
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
