-- A call's decisions past 32,767: each blocked fact of the scope is traced (docs/spec/
-- context-assembler.md, "Hard filters"), so a scope holding more stale or conflicting facts than
-- a smallint counts made every context call a 500 (decision_positions is smallint[], migration
-- 0026). Such a call keeps its assembler order in decision_positions_wide instead, NULL for every
-- other call: no table rewrite, and no byte more for them. Readers take
-- coalesce(decision_positions_wide, decision_positions).
ALTER TABLE context_calls ADD COLUMN decision_positions_wide integer[];

-- Every decision of one call, in order, from either form (GET /v1/inspect, replay, /ui): as in
-- migration 0032, its positions from either column.
CREATE OR REPLACE FUNCTION public.haki_trace_decisions(p_project_id text, p_trace_id uuid)
RETURNS TABLE (
    ord bigint, item_type text, item_id uuid, decision text, reason_code text, rank integer,
    score double precision, similarity double precision, text_rank double precision,
    recency double precision, cosine_distance double precision, tokens integer
)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT u.ord::bigint, k.item_type, u.item_id, k.decision, k.reason_code, u.rank::integer,
       public.haki_trace_value(u.score, public.haki_trace_score(u.distance, u.text_rank, u.recency, c.weights)),
       public.haki_trace_value(u.similarity, public.haki_trace_similarity(u.distance)),
       u.text_rank, u.recency, u.distance, u.tokens::integer
FROM public.context_calls AS c
CROSS JOIN LATERAL unnest(c.decision_ids,
                          coalesce(c.decision_positions_wide, c.decision_positions::integer[]),
                          c.decision_codes, c.decision_ranks,
                          c.decision_tokens, c.decision_distances, c.decision_text_ranks,
                          c.decision_recencies, c.decision_scores, c.decision_similarities)
    AS u(item_id, ord, code, rank, tokens, distance, text_rank, recency, score, similarity)
JOIN public.haki_trace_codes() AS k ON k.code = u.code
WHERE c.project_id = p_project_id
  AND c.trace_id = p_trace_id
UNION ALL
SELECT t.ord::bigint, t.item_type, t.item_id, t.decision, t.reason_code, t.rank, t.score,
       t.similarity, t.text_rank, t.recency, t.cosine_distance, t.tokens
FROM public.context_traces AS t
WHERE t.project_id = p_project_id
  AND t.trace_id = p_trace_id
$$;
