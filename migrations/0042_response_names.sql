-- Which Idempotency-Key records an erasure takes, written once (docs/spec/api.md, "Memory
-- lifecycle"): erase_subject held the test inline, and erase_memory (one fact or one event) left
-- the records, so a retry of the write, or of an extraction, replayed the erased memory.
--
-- haki_response_names: the ids of `ids` that a stored response names, as the `fact_id` or
-- `event_id` of an element of its `facts` or `events` array (both arrays: an extraction's answer
-- names its events beside its, maybe no, facts); compared as text, as the response stores them.
-- Inlined into its caller (one SELECT, no SET clause): a caller passes `ids` as a column, not a
-- subquery, which would keep it from being inlined. A column of a CTE read once is then an
-- InitPlan, so its ids are hashed once for all the records, not once a record.
CREATE FUNCTION public.haki_response_names(response jsonb, ids uuid[])
RETURNS TABLE (item_id text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT n.item_id
FROM pg_catalog.unnest(ARRAY['facts', 'events']) AS a(name)
CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(
         CASE WHEN pg_catalog.jsonb_typeof(response OPERATOR(pg_catalog.->) a.name)
                   OPERATOR(pg_catalog.=) 'array'
              THEN response OPERATOR(pg_catalog.->) a.name
              ELSE '[]'::jsonb END
     ) AS r(item)
CROSS JOIN LATERAL (
    SELECT coalesce(r.item OPERATOR(pg_catalog.->>) 'fact_id', r.item OPERATOR(pg_catalog.->>) 'event_id')
) AS n(item_id)
WHERE n.item_id OPERATOR(pg_catalog.=) ANY (SELECT g.id::text FROM pg_catalog.unnest(ids) AS g(id))
$$;

COMMENT ON FUNCTION public.haki_response_names(jsonb, uuid[]) IS
    'The ids of ids that a stored Idempotency-Key response names: the records an erasure takes (docs/spec/api.md, "Memory lifecycle"; migration 0042).';

-- An erasure reads the records of its scope only: a record names ids of one scope (a write batch,
-- an extraction), and a project's records were all read once per erasure (about 17 us each), so a
-- busy project's day of keys held DELETE /v1/facts near its time-out. Records claimed before this
-- migration have no subject and are read by every erasure of the project until they expire
-- (HAKI_IDEMPOTENCY_TTL_SECONDS).
ALTER TABLE idempotency_keys ADD COLUMN subject_id text;
CREATE INDEX idempotency_keys_scope ON idempotency_keys (project_id, subject_id);
