-- Webhooks (docs/webhooks.md): subscriptions per project, an outbox that the change's own
-- transaction writes, and one delivery row per (event, subscription) that the delivery worker
-- makes and updates.
--
-- The outbox rows of fact and conflict state changes are written by triggers, so that every
-- statement that changes a fact's status or a conflict set (a write's supersedes, a conflict's
-- detection or resolution, a retraction, the erasure of a member) writes its events in its own
-- transaction: an event exists if and only if its change committed. A trigger writes a row only
-- when a subscription of the project wants the kind, so a project without webhooks pays one
-- index probe per changed row and writes nothing.

CREATE TABLE webhook_subscriptions (
    project_id text NOT NULL,
    webhook_id uuid NOT NULL,
    url text NOT NULL,
    events text[] NOT NULL,
    include_content boolean NOT NULL DEFAULT false,
    -- The signing key: shown once at creation, read only by the delivery worker.
    secret text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (project_id, webhook_id)
);

CREATE TABLE webhook_outbox (
    project_id text NOT NULL,
    event_id uuid NOT NULL DEFAULT gen_random_uuid(),
    -- Insertion order, the order of a subject's deliveries.
    seq bigint GENERATED ALWAYS AS IDENTITY,
    subject_id text NOT NULL,
    kind text NOT NULL,
    -- The payload's ids and counts; never memory content.
    data jsonb NOT NULL,
    -- Memory content, merged into `data` for subscriptions with include_content; NULL unless one
    -- of the project's subscriptions to the kind asked for it.
    content jsonb,
    -- The facts whose content `content` carries: an erasure deletes the events that carry them.
    fact_ids uuid[] NOT NULL DEFAULT '{}',
    -- The transaction's clock, not its start: a subscription the trigger saw is older.
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    fanned_out boolean NOT NULL DEFAULT false,
    PRIMARY KEY (project_id, event_id),
    CHECK (kind IN ('conflict.opened', 'conflict.resolved', 'fact.superseded', 'fact.retracted',
                    'subject.erased', 'extraction.completed'))
);

CREATE INDEX webhook_outbox_waiting ON webhook_outbox (project_id, seq) WHERE NOT fanned_out;
CREATE INDEX webhook_outbox_content ON webhook_outbox (project_id, subject_id) WHERE content IS NOT NULL;
CREATE INDEX webhook_outbox_done ON webhook_outbox (project_id, created_at) WHERE fanned_out;

CREATE TABLE webhook_deliveries (
    project_id text NOT NULL,
    webhook_id uuid NOT NULL,
    event_id uuid NOT NULL,
    event_seq bigint NOT NULL,
    subject_id text NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz,
    -- The receiver's HTTP status of the last attempt (NULL: no answer); its body is never kept.
    last_status integer,
    last_error text,
    delivered_at timestamptz,
    PRIMARY KEY (project_id, webhook_id, event_id),
    FOREIGN KEY (project_id, webhook_id) REFERENCES webhook_subscriptions (project_id, webhook_id)
        ON DELETE CASCADE,
    FOREIGN KEY (project_id, event_id) REFERENCES webhook_outbox (project_id, event_id)
        ON DELETE CASCADE
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (project_id, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (project_id, webhook_id, subject_id, event_seq)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (project_id, event_id);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (project_id, webhook_id, event_seq DESC);

-- NULL when no subscription of the project wants the kind; else whether one wants content.
CREATE FUNCTION public.haki_webhook_wants(p_project_id text, p_kind text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
SELECT bool_or(s.include_content)
FROM public.webhook_subscriptions AS s
WHERE s.project_id = p_project_id
  AND p_kind = ANY (s.events)
$$;

-- fact.superseded / fact.retracted: a fact leaves `active` (or a superseded one is retracted).
CREATE FUNCTION public.haki_webhook_fact_status() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    kind text := 'fact.' || NEW.status;
    wants boolean := public.haki_webhook_wants(NEW.project_id, kind);
BEGIN
    IF wants IS NOT NULL THEN
        INSERT INTO public.webhook_outbox (project_id, subject_id, kind, data, content, fact_ids)
        VALUES (
            NEW.project_id, NEW.subject_id, kind,
            jsonb_build_object('fact_id', NEW.fact_id, 'subject_id', NEW.subject_id, 'key', NEW.key,
                               'status', NEW.status, 'valid_to', NEW.valid_to),
            CASE WHEN wants THEN jsonb_build_object('content', NEW.content) END,
            ARRAY[NEW.fact_id]
        );
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_fact_status AFTER UPDATE OF status ON facts
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('superseded', 'retracted'))
    EXECUTE FUNCTION public.haki_webhook_fact_status();

-- conflict.opened: a statement put facts in a conflict set (a new set, or new members of an open
-- one). One event per set, with every member, fired once the statement's rows are all in.
CREATE FUNCTION public.haki_webhook_conflict_members() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Keeps a copy of open conflict: it reports the members the statement just wrote, as the
    -- write side reads them (the set's current status), not membership at an instant.
    INSERT INTO public.webhook_outbox (project_id, subject_id, kind, data, content, fact_ids)
    SELECT cs.project_id, cs.subject_id, 'conflict.opened',
           jsonb_build_object('conflict_set_id', cs.conflict_set_id, 'subject_id', cs.subject_id,
                              'key', cs.key, 'member_fact_ids', m.ids, 'new_member_fact_ids', n.ids),
           CASE WHEN w.wants THEN jsonb_build_object('member_contents', m.contents) END,
           m.ids
    FROM (
        SELECT nm.project_id, nm.conflict_set_id, array_agg(nm.fact_id ORDER BY nm.fact_id) AS ids
        FROM new_members AS nm
        GROUP BY nm.project_id, nm.conflict_set_id
    ) AS n
    JOIN public.conflict_sets AS cs
      ON cs.project_id = n.project_id AND cs.conflict_set_id = n.conflict_set_id
    CROSS JOIN LATERAL (SELECT public.haki_webhook_wants(cs.project_id, 'conflict.opened') AS wants) AS w
    CROSS JOIN LATERAL (
        SELECT array_agg(f.fact_id ORDER BY f.fact_id) AS ids,
               jsonb_object_agg(f.fact_id, f.content) AS contents
        FROM public.conflict_members AS cm
        JOIN public.facts AS f ON f.project_id = cm.project_id AND f.fact_id = cm.fact_id
        WHERE cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id
    ) AS m
    WHERE w.wants IS NOT NULL
      AND cs.status = 'open';
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_conflict_members AFTER INSERT ON conflict_members
    REFERENCING NEW TABLE AS new_members
    FOR EACH STATEMENT
    EXECUTE FUNCTION public.haki_webhook_conflict_members();

-- conflict.resolved: an open set becomes resolved (POST /v1/conflicts/{id}/resolve, or the
-- erasure of a member that leaves one). Fired after the statement, so the members' statuses
-- are the resolution's.
CREATE FUNCTION public.haki_webhook_conflict_resolved() RETURNS trigger
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
                   'superseded_fact_ids', coalesce(m.dropped, '{}')),
               CASE WHEN wants THEN jsonb_build_object('member_contents', coalesce(m.contents, '{}')) END,
               coalesce(m.ids, '{}')
        FROM (
            SELECT array_agg(f.fact_id ORDER BY f.fact_id) AS ids,
                   array_agg(f.fact_id ORDER BY f.fact_id) FILTER (WHERE f.status = 'active') AS kept,
                   array_agg(f.fact_id ORDER BY f.fact_id) FILTER (WHERE f.status <> 'active') AS dropped,
                   jsonb_object_agg(f.fact_id, f.content) AS contents
            FROM public.conflict_members AS cm
            JOIN public.facts AS f ON f.project_id = cm.project_id AND f.fact_id = cm.fact_id
            WHERE cm.project_id = NEW.project_id AND cm.conflict_set_id = NEW.conflict_set_id
        ) AS m;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_conflict_resolved AFTER UPDATE OF status ON conflict_sets
    FOR EACH ROW
    WHEN (OLD.status = 'open' AND NEW.status = 'resolved')
    EXECUTE FUNCTION public.haki_webhook_conflict_resolved();
