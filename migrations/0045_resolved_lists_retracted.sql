-- conflict.resolved listed every member no longer active as `superseded_fact_ids`: a set left
-- with one claim because a member was retracted named the retracted fact superseded (its own
-- event is fact.retracted, GET /v1/facts says retracted). The superseded members are listed
-- there, the retracted ones in `retracted_fact_ids` (docs/webhooks.md). Only the payload changes.
CREATE OR REPLACE FUNCTION public.haki_webhook_conflict_resolved() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    wants boolean := public.haki_webhook_wants(NEW.project_id, 'conflict.resolved');
BEGIN
    -- Keeps a copy of open conflict: it reads the members of the set the statement resolved.
    -- Keeps a copy of believed: a member the resolution kept is the one still `active` after it.
    IF wants IS NOT NULL THEN
        INSERT INTO public.webhook_outbox (project_id, subject_id, kind, data, content, fact_ids)
        SELECT NEW.project_id, NEW.subject_id, 'conflict.resolved',
               jsonb_build_object(
                   'conflict_set_id', NEW.conflict_set_id, 'subject_id', NEW.subject_id, 'key', NEW.key,
                   'member_fact_ids', coalesce(m.ids, '{}'),
                   'kept_fact_ids', coalesce(m.kept, '{}'),
                   'superseded_fact_ids', coalesce(m.superseded, '{}'),
                   'retracted_fact_ids', coalesce(m.retracted, '{}')),
               CASE WHEN wants THEN jsonb_build_object('member_contents', coalesce(m.contents, '{}')) END,
               coalesce(m.ids, '{}')
        FROM (
            SELECT array_agg(f.fact_id ORDER BY f.fact_id) AS ids,
                   array_agg(f.fact_id ORDER BY f.fact_id) FILTER (WHERE f.status = 'active') AS kept,
                   array_agg(f.fact_id ORDER BY f.fact_id) FILTER (WHERE f.status = 'superseded') AS superseded,
                   array_agg(f.fact_id ORDER BY f.fact_id) FILTER (WHERE f.status = 'retracted') AS retracted,
                   jsonb_object_agg(f.fact_id, f.content) AS contents
            FROM public.conflict_members AS cm
            JOIN public.facts AS f ON f.project_id = cm.project_id AND f.fact_id = cm.fact_id
            WHERE cm.project_id = NEW.project_id AND cm.conflict_set_id = NEW.conflict_set_id
        ) AS m;
    END IF;
    RETURN NULL;
END
$$;
