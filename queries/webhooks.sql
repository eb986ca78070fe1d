-- Webhooks (migration 0027, docs/webhooks.md): subscriptions, the outbox's fan-out into
-- deliveries, and the delivery worker's claims. The outbox rows of fact and conflict changes are
-- written by the migration's triggers, in the change's own transaction.

-- name: lock_project_webhooks(project_id)!
-- Serialises a project's new subscriptions until the transaction ends, so that insert_webhook's
-- count sees a concurrent one's (two that both counted max_webhooks - 1 were both stored). The key
-- is in the bigint space of lock_fact_keys, under its own seed: a collision only shares a lock.
SELECT pg_advisory_xact_lock(hashtextextended(:project_id, hashtextextended('webhooks', 0)));

-- name: insert_webhook(project_id, webhook_id, url, events, include_content, secret, max_webhooks)^
-- Subscribes a URL to event kinds, unless the project holds max_webhooks already (no row then).
INSERT INTO webhook_subscriptions (project_id, webhook_id, url, events, include_content, secret)
SELECT :project_id, :webhook_id, :url, :events::text[], :include_content, :secret
WHERE (
    SELECT count(*)
    FROM webhook_subscriptions AS s
    WHERE s.project_id = :project_id
) < :max_webhooks
RETURNING webhook_id, project_id, url, events, include_content, created_at;

-- name: list_webhooks(project_id)
-- A project's subscriptions (never their secrets) with their deliveries by status and the last
-- attempt made.
SELECT s.webhook_id, s.project_id, s.url, s.events, s.include_content, s.created_at,
       coalesce(c.pending, 0) AS pending,
       coalesce(c.delivered, 0) AS delivered,
       coalesce(c.dead, 0) AS dead,
       c.last_attempt_at,
       (SELECT d.last_status
        FROM webhook_deliveries AS d
        WHERE d.project_id = :project_id
          AND d.webhook_id = s.webhook_id
          AND d.last_attempt_at = c.last_attempt_at
        LIMIT 1) AS last_status
FROM webhook_subscriptions AS s
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE d.status = 'pending') AS pending,
           count(*) FILTER (WHERE d.status = 'delivered') AS delivered,
           count(*) FILTER (WHERE d.status = 'dead') AS dead,
           max(d.last_attempt_at) AS last_attempt_at
    FROM webhook_deliveries AS d
    WHERE d.project_id = :project_id
      AND d.webhook_id = s.webhook_id
) AS c ON true
WHERE s.project_id = :project_id
ORDER BY s.created_at, s.webhook_id;

-- name: delete_webhook(project_id, webhook_id)$
-- Unsubscribes; its deliveries go with it (foreign key). NULL when there is no such webhook.
DELETE FROM webhook_subscriptions AS s
WHERE s.project_id = :project_id
  AND s.webhook_id = :webhook_id
RETURNING s.webhook_id;

-- name: webhook_exists(project_id, webhook_id)$
-- Whether the project holds this webhook.
SELECT EXISTS (
    SELECT 1
    FROM webhook_subscriptions AS s
    WHERE s.project_id = :project_id
      AND s.webhook_id = :webhook_id
) AS found;

-- name: list_webhook_deliveries(project_id, webhook_id, status, page_size)
-- One webhook's deliveries, newest event first, optionally of one status (dead letters).
SELECT d.event_id, o.kind AS type, d.subject_id, d.status, d.attempts, o.created_at,
       d.next_attempt_at, d.last_attempt_at, d.last_status, d.last_error, d.delivered_at
FROM webhook_deliveries AS d
JOIN webhook_outbox AS o
  ON o.project_id = :project_id AND o.event_id = d.event_id
WHERE d.project_id = :project_id
  AND d.webhook_id = :webhook_id
  AND (:status::text IS NULL OR d.status = :status)
ORDER BY d.event_seq DESC
LIMIT :page_size;

-- name: note_extraction_completed(project_id, subject_id, data)!
-- The outbox row of a written extraction (ids and counts), in the extraction's transaction,
-- when a subscription of the project wants it.
INSERT INTO webhook_outbox (project_id, subject_id, kind, data)
SELECT :project_id, :subject_id, 'extraction.completed', :data::jsonb
WHERE public.haki_webhook_wants(:project_id, 'extraction.completed') IS NOT NULL;

-- name: list_webhook_projects()
-- The projects with outbox events to fan out or deliveries due, for the delivery worker to visit
-- one by one with statements scoped to each; project ids only.
WITH busy AS (
    SELECT o.project_id
    FROM webhook_outbox AS o
    WHERE NOT o.fanned_out
    UNION
    SELECT d.project_id
    FROM webhook_deliveries AS d
    WHERE d.status = 'pending'
      AND d.next_attempt_at <= clock_timestamp()
)
SELECT b.project_id
FROM busy AS b;

-- name: fan_out_webhook_events(project_id, batch)$
-- Gives up to `batch` new outbox events of a project, in outbox order, one delivery per
-- subscription that wants the kind and existed when the event was written. One process at a time
-- per project (a transaction lock, not waited for), so deliveries are made in the events' order.
WITH gate AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended('haki.webhooks', hashtextextended(:project_id, 0)))
        AS held
),
picked AS (
    SELECT o.event_id, o.seq, o.subject_id, o.kind, o.created_at
    FROM webhook_outbox AS o
    WHERE o.project_id = :project_id
      AND NOT o.fanned_out
      AND (SELECT g.held FROM gate AS g)
    ORDER BY o.seq
    LIMIT :batch
    FOR UPDATE OF o SKIP LOCKED
),
made AS (
    INSERT INTO webhook_deliveries (project_id, webhook_id, event_id, event_seq, subject_id)
    SELECT :project_id, s.webhook_id, p.event_id, p.seq, p.subject_id
    FROM picked AS p
    JOIN webhook_subscriptions AS s
      ON s.project_id = :project_id
     AND p.kind = ANY (s.events)
     AND s.created_at <= p.created_at
    ORDER BY p.seq
    ON CONFLICT DO NOTHING
    RETURNING event_id
),
marked AS (
    UPDATE webhook_outbox AS o
    SET fanned_out = true
    FROM picked AS p
    WHERE o.project_id = :project_id
      AND o.event_id = p.event_id
    RETURNING o.event_id
)
SELECT count(*) AS events
FROM marked AS m;

-- name: claim_webhook_deliveries(project_id, batch, lease_seconds)
-- Leases up to `batch` due deliveries of a project for one attempt each, in a short transaction
-- of its own (the attempt runs after the commit, holding no lock): the first pending one of each
-- (webhook, subject) only, so a subject's events go out in order and a later one waits for an
-- earlier one to be delivered or dead. The lease is the attempt counted and the delivery made
-- due again only after lease_seconds: no process claims it meanwhile, and a process that dies
-- mid-attempt leaves it to be claimed again once the lease runs out.
WITH due AS (
    SELECT d.webhook_id AS webhook_id, d.event_id AS event_id
    FROM webhook_deliveries AS d
    WHERE d.project_id = :project_id
      AND d.status = 'pending'
      AND d.next_attempt_at <= clock_timestamp()
      AND NOT EXISTS (
          SELECT 1
          FROM webhook_deliveries AS e
          WHERE e.project_id = :project_id
            AND e.webhook_id = d.webhook_id
            AND e.subject_id = d.subject_id
            AND e.status = 'pending'
            AND e.event_seq < d.event_seq
      )
    ORDER BY d.event_seq
    LIMIT :batch
    FOR UPDATE OF d SKIP LOCKED
),
leased AS (
    UPDATE webhook_deliveries AS d
    SET attempts = d.attempts + 1,
        next_attempt_at = clock_timestamp() + make_interval(secs => :lease_seconds::float8)
    FROM due AS u
    WHERE d.project_id = :project_id
      AND d.webhook_id = u.webhook_id
      AND d.event_id = u.event_id
    RETURNING d.webhook_id AS webhook_id, d.event_id AS event_id, d.event_seq AS event_seq,
              d.subject_id AS subject_id, d.attempts AS attempts
)
SELECT l.webhook_id AS webhook_id, l.event_id AS event_id, l.subject_id AS subject_id,
       l.attempts AS attempts, s.url AS url, s.secret AS secret,
       s.include_content AS include_content, o.kind AS kind, o.data AS data,
       o.content AS content, o.created_at AS created_at
FROM leased AS l
JOIN webhook_subscriptions AS s
  ON s.project_id = :project_id AND s.webhook_id = l.webhook_id
JOIN webhook_outbox AS o
  ON o.project_id = :project_id AND o.event_id = l.event_id
ORDER BY l.event_seq;

-- name: record_webhook_attempt(project_id, webhook_id, event_id, attempts, max_attempts, retry_base_seconds, http_status, error)$
-- Records the outcome of the attempt that claimed a delivery: delivered (no error), or pending
-- again after a delay that doubles with each attempt (capped at an hour), or dead after
-- max_attempts. `attempts` (the claim's count) names the claim: no row when the webhook or the
-- event was deleted meanwhile, or when the lease ran out and another claim took the delivery over.
-- The doubling stops at 2^64, past the hour for any base: a larger power overflows float8.
UPDATE webhook_deliveries AS d
SET last_attempt_at = clock_timestamp(),
    last_status = :http_status::integer,
    last_error = :error::text,
    status = CASE WHEN :error::text IS NULL THEN 'delivered'
                  WHEN d.attempts >= :max_attempts THEN 'dead'
                  ELSE 'pending' END,
    delivered_at = CASE WHEN :error::text IS NULL THEN clock_timestamp() END,
    next_attempt_at = CASE WHEN :error::text IS NULL THEN clock_timestamp()
                           ELSE clock_timestamp() + make_interval(
                               secs => least(:retry_base_seconds::float8 * power(2, least(d.attempts - 1, 64)), 3600))
                      END
WHERE d.project_id = :project_id
  AND d.webhook_id = :webhook_id
  AND d.event_id = :event_id
  AND d.attempts = :attempts
  AND d.status = 'pending'
RETURNING d.status AS status;

-- name: purge_webhook_history(project_id, keep_days)$
-- Deletes a project's fanned-out events older than keep_days whose deliveries are all delivered
-- (dead letters stay visible until their webhook is deleted). Returns the events deleted.
WITH gone AS (
    DELETE FROM webhook_outbox AS o
    WHERE o.project_id = :project_id
      AND o.fanned_out
      AND o.created_at < clock_timestamp() - make_interval(days => :keep_days)
      AND NOT EXISTS (
          SELECT 1
          FROM webhook_deliveries AS d
          WHERE d.project_id = :project_id
            AND d.event_id = o.event_id
            AND d.status <> 'delivered'
      )
    RETURNING o.event_id
)
SELECT count(*) AS events
FROM gone AS g;

-- name: count_webhook_dead_letters_all_projects()$
-- Dead deliveries across every project, for the haki_webhook_dead_letters gauge.
SELECT count(*) AS dead
FROM webhook_deliveries
WHERE status = 'dead';
