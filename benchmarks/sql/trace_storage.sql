-- Benchmark-only statements of benchmarks/trace_storage.py: the trace as it was stored before
-- migration 0026 (one context_traces row per decision) and as it was written until 2026-12-05
-- (one JSON array), to measure the forms side by side.

-- name: bench_insert_row_trace(project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status, warnings, empty_reason, facts_served, episodes_served, include_episodes, recall_max_distance, text_search_config, weights, as_of, replay_of, decisions)!
-- The trace write before migration 0026: the call's row (no arrays) and one row per decision.
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

-- name: bench_insert_compact_json(project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status, warnings, empty_reason, facts_served, episodes_served, include_episodes, recall_max_distance, text_search_config, weights, as_of, replay_of, decisions)!
-- The compact trace's write until 2026-12-05: the decisions as one JSON array, unpacked by
-- json_to_recordset, coded and grouped by part on the server; the same row as
-- insert_context_trace writes.
WITH d AS (
    SELECT t.ord, t.item_id, k.code, k.part, t.rank, t.tokens, t.cosine_distance, t.text_rank,
           t.recency,
           public.haki_trace_exception(
               t.score,
               public.haki_trace_score(t.cosine_distance, t.text_rank, t.recency, :weights::float8[])
           ) AS score,
           public.haki_trace_exception(t.similarity, public.haki_trace_similarity(t.cosine_distance))
               AS similarity
    FROM ROWS FROM (
        json_to_recordset(:decisions::json) AS (
            item_type text, item_id uuid, decision text, reason_code text, rank integer,
            score float8, similarity float8, text_rank float8, recency float8,
            cosine_distance float8, tokens integer
        )
    ) WITH ORDINALITY AS t(item_type, item_id, decision, reason_code, rank, score, similarity,
                           text_rank, recency, cosine_distance, tokens, ord)
    -- An unknown decision gets no code, and context_calls_decision_codes_known refuses the row.
    LEFT JOIN public.haki_trace_codes() AS k
      ON k.item_type = t.item_type AND k.decision = t.decision AND k.reason_code = t.reason_code
)
INSERT INTO context_calls (
    project_id, trace_id, subject_id, query, profile, budget_tokens, used_tokens, status,
    warnings, empty_reason, facts_served, episodes_served, include_episodes,
    recall_max_distance, text_search_config, weights, as_of, replay_of,
    decision_ids, decision_positions, decision_codes, decision_ranks, decision_tokens,
    decision_distances, decision_text_ranks, decision_recencies, decision_scores,
    decision_similarities, decision_served, decision_over_budget, decision_below_floor
)
SELECT :project_id, :trace_id, :subject_id, :query, :profile, :budget_tokens, :used_tokens, :status,
       :warnings::text[], :empty_reason, :facts_served, :episodes_served, :include_episodes,
       :recall_max_distance, :text_search_config, :weights::float8[], :as_of::timestamptz,
       :replay_of::uuid,
       -- Grouped by part (haki_trace_codes), in the assembler's order within each.
       coalesce(array_agg(d.item_id ORDER BY d.part, d.ord), '{}'::uuid[]),
       coalesce(array_agg(d.ord::smallint ORDER BY d.part, d.ord), '{}'::smallint[]),
       coalesce(array_agg(d.code ORDER BY d.part, d.ord), '{}'::smallint[]),
       coalesce(array_agg(d.rank::smallint ORDER BY d.part, d.ord), '{}'::smallint[]),
       coalesce(array_agg(d.tokens::smallint ORDER BY d.part, d.ord), '{}'::smallint[]),
       coalesce(array_agg(d.cosine_distance ORDER BY d.part, d.ord), '{}'::float8[]),
       coalesce(array_agg(d.text_rank ORDER BY d.part, d.ord), '{}'::float8[]),
       coalesce(array_agg(d.recency ORDER BY d.part, d.ord), '{}'::float8[]),
       -- No exception (the common case): no array at all.
       CASE WHEN bool_or(d.score IS NOT NULL) THEN array_agg(d.score ORDER BY d.part, d.ord) END,
       CASE WHEN bool_or(d.similarity IS NOT NULL)
            THEN array_agg(d.similarity ORDER BY d.part, d.ord)
       END,
       count(*) FILTER (WHERE d.part = 1),
       count(*) FILTER (WHERE d.part = 2),
       count(*) FILTER (WHERE d.part = 3)
FROM d;

-- name: bench_send_trace_arrays(item_ids, positions, codes, ranks, tokens, cosine_distances, text_ranks, recencies, scores, similarities)$
-- The ten arrays insert_context_trace sends, sent to a statement that only counts them: what
-- their transfer costs the write (the client's encoding, the server's decoding, the round trip).
SELECT cardinality(:item_ids::uuid[]) + cardinality(:positions::smallint[])
       + cardinality(:codes::smallint[]) + cardinality(:ranks::smallint[])
       + cardinality(:tokens::smallint[]) + cardinality(:cosine_distances::float8[])
       + cardinality(:text_ranks::float8[]) + cardinality(:recencies::float8[])
       + cardinality(:scores::float8[]) + cardinality(:similarities::float8[]) AS elements;

-- name: bench_round_trip()$
-- One round trip that sends and reads nothing: the floor of any statement's time.
SELECT 1 AS one;

-- name: bench_trace_bytes()^
-- What the traces take on disk: both tables with their TOAST and indexes, and the WAL position.
SELECT pg_total_relation_size('context_calls') + pg_total_relation_size('context_traces') AS bytes,
       pg_current_wal_lsn() - '0/0'::pg_lsn AS wal_bytes;

-- name: bench_array_bytes(project_id)^
-- The compact form's arrays of a project's calls, a call on average: as stored (compressed) and
-- the score parts as real[] instead (the encoding not taken: it changes the values inspect shows).
SELECT avg(pg_column_size(c.decision_ids))::float8 AS ids,
       avg(pg_column_size(c.decision_codes) + pg_column_size(c.decision_ranks)
           + pg_column_size(c.decision_tokens))::float8 AS small,
       avg(pg_column_size(c.decision_distances) + pg_column_size(c.decision_text_ranks)
           + pg_column_size(c.decision_recencies))::float8 AS parts,
       avg(coalesce(pg_column_size(c.decision_scores), 0)
           + coalesce(pg_column_size(c.decision_similarities), 0))::float8 AS exceptions,
       avg(pg_column_size(c.decision_distances::real[]) + pg_column_size(c.decision_text_ranks::real[])
           + pg_column_size(c.decision_recencies::real[]))::float8 AS parts_as_real
FROM context_calls AS c
WHERE c.project_id = :project_id;

-- name: bench_fact_usage(project_id, fact_ids)$
-- What a list of facts is worth (haki_fact_usage, as GET /v1/facts reads it), summed.
SELECT sum(u.served_count + u.excluded_count)::bigint AS counted
FROM unnest(:fact_ids::uuid[]) AS i(fact_id)
CROSS JOIN LATERAL public.haki_fact_usage(:project_id, i.fact_id) AS u;

-- name: bench_dead_rows()^
-- Dead row versions the purge left in the calls' heap (before a vacuum takes them).
SELECT coalesce(n_dead_tup, 0) AS dead_rows, coalesce(n_live_tup, 0) AS live_rows
FROM pg_stat_user_tables
WHERE relname = 'context_calls';

-- name: bench_trace_relations()
-- What each relation of the traces takes on disk, by part: the two tables' heaps, their TOAST
-- tables with their indexes, and each of their indexes.
SELECT CASE WHEN c.oid IN ('context_calls'::regclass, 'context_traces'::regclass) THEN 'heap'
            WHEN c.relkind = 't' THEN 'toast'
            WHEN t.relkind = 't' THEN 'toast index'
            ELSE c.relname::text
       END AS part,
       pg_relation_size(c.oid) AS bytes
FROM pg_class AS c
LEFT JOIN pg_index AS i ON i.indexrelid = c.oid
LEFT JOIN pg_class AS t ON t.oid = i.indrelid
WHERE c.oid IN ('context_calls'::regclass, 'context_traces'::regclass)
   OR c.oid IN (SELECT r.reltoastrelid FROM pg_class AS r
                WHERE r.oid IN ('context_calls'::regclass, 'context_traces'::regclass))
   OR i.indrelid IN ('context_calls'::regclass, 'context_traces'::regclass)
   OR i.indrelid IN (SELECT r.reltoastrelid FROM pg_class AS r
                     WHERE r.oid IN ('context_calls'::regclass, 'context_traces'::regclass));

-- name: bench_clone_calls(project_id, source_project_id, first, last, days)!
-- Copies each call of the source project into the project as copies number first..last, made
-- `days` days earlier and a millisecond apart per copy: a day's worth of calls for the retention
-- purge without a million round trips. Only the project, trace ids and instants differ.
INSERT INTO context_calls (
    project_id, trace_id, subject_id, query, created_at, budget_tokens, used_tokens, status,
    warnings, empty_reason, facts_served, episodes_served, profile, include_episodes,
    recall_max_distance, as_of, replay_of, text_search_config, weights, decision_ids,
    decision_positions, decision_codes, decision_ranks, decision_tokens, decision_distances,
    decision_text_ranks, decision_recencies, decision_scores, decision_similarities,
    decision_served, decision_over_budget, decision_below_floor
)
SELECT :project_id, gen_random_uuid(), c.subject_id, c.query,
       c.created_at - make_interval(days => :days) - r.i * interval '1 millisecond',
       c.budget_tokens, c.used_tokens, c.status, c.warnings, c.empty_reason, c.facts_served,
       c.episodes_served, c.profile, c.include_episodes, c.recall_max_distance, c.as_of,
       c.replay_of, c.text_search_config, c.weights, c.decision_ids, c.decision_positions,
       c.decision_codes, c.decision_ranks, c.decision_tokens, c.decision_distances,
       c.decision_text_ranks, c.decision_recencies, c.decision_scores, c.decision_similarities,
       c.decision_served, c.decision_over_budget, c.decision_below_floor
FROM context_calls AS c
CROSS JOIN generate_series(:first::integer, :last::integer) AS r(i)
WHERE c.project_id = :source_project_id;
