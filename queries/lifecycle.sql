-- Memory lifecycle (migration 0014): erasure, trace retention, listing and export.

-- name: lock_erasure_scope(project_id, kind, subject_id, item_id)!
-- The scope's lock (project, subject), exclusive, until the transaction ends; taken before
-- erase_subject or erase_memory. Erasures of one scope run one at a time: they lock rows the
-- scope's other erasures lock too (a trace naming both items, an event and the one after it) in
-- no common order, and two of them deadlocked. Context calls (open_context_call), writes, PATCH,
-- resolutions, extractions (share_erasure_scope) and the event context worker
-- (share_event_scopes) hold it shared, each before any other lock of theirs: the erasure waits
-- for those in flight and its statement, whose snapshot is taken after, sees all they committed
-- (a trace, a conflict member); those that come later wait for it. Without it a trace outlived
-- its subject's erasure, a write's conflict member named an erased fact (a foreign key error)
-- and the worker deadlocked with the erasure. The scope is subject_id's (kind `subject`) or that
-- of the fact or event item_id (nothing is locked when there is none). Other scopes never wait.
-- The two-integer key space of advisory locks is apart from the bigint one of lock_migrations and
-- lock_fact_keys; a hash collision only makes two scopes share a lock. `haki import` of an export
-- takes it too (kind `subject`): a second import, or a write, of the scope waits for it to commit,
-- then finds the scope no longer empty, or restored whole.
SELECT pg_advisory_xact_lock(hashtext(:project_id), hashtext(s.subject_id))
FROM (
    SELECT :subject_id::text AS subject_id
    WHERE :kind::text = 'subject'
    UNION ALL
    SELECT f.subject_id
    FROM facts AS f
    WHERE :kind::text = 'fact'
      AND f.project_id = :project_id
      AND f.fact_id = :item_id
    UNION ALL
    SELECT e.subject_id
    FROM events AS e
    WHERE :kind::text = 'event'
      AND e.project_id = :project_id
      AND e.event_id = :item_id
) AS s;

-- name: share_erasure_scope(project_id, subject_id)!
-- The scope's lock of lock_erasure_scope, shared, until the transaction ends: a write of the scope
-- (facts, events, PATCH, a resolution, an extraction) takes it before any other lock, so that no
-- erasure of the scope runs beside it. Shared holders never wait for each other.
SELECT pg_advisory_xact_lock_shared(hashtext(:project_id), hashtext(:subject_id));

-- name: share_event_scopes(project_id, event_ids)!
-- The shared scope lock (share_erasure_scope) of every scope holding one of these events, for the
-- event context worker, whose batch may span scopes: taken in one order (of the lock key), as
-- shared requests queue behind a waiting erasure, and two batches taking two scopes crosswise
-- with erasures queued on both would wait for each other. An event already gone locks nothing.
SELECT pg_advisory_xact_lock_shared(hashtext(:project_id), k.subject_key)
FROM (
    SELECT DISTINCT hashtext(e.subject_id) AS subject_key
    FROM events AS e
    WHERE e.project_id = :project_id
      AND e.event_id = ANY (:event_ids::uuid[])
    ORDER BY subject_key
) AS k;

-- name: erase_subject(project_id, subject_id, erasure_id, key_id)^
-- Erases every row of one scope in one statement and audits it: conflict members and sets,
-- facts, events, context calls and their decisions, and the Idempotency-Key records whose
-- stored response names one of the scope's facts or events (haki_response_names; a write
-- batch is one scope, so a record names only ids of that scope). Foreign keys are checked
-- at the end of the statement, when the members and the facts they reference are both gone.
-- Returns the counts per kind.
WITH gone_members AS (
    DELETE FROM conflict_members AS cm
    USING conflict_sets AS cs
    WHERE cm.project_id = :project_id
      AND cs.project_id = cm.project_id
      AND cs.conflict_set_id = cm.conflict_set_id
      AND cs.subject_id = :subject_id
    RETURNING cm.fact_id
),
gone_sets AS (
    DELETE FROM conflict_sets AS cs
    WHERE cs.project_id = :project_id
      AND cs.subject_id = :subject_id
    RETURNING cs.conflict_set_id
),
gone_facts AS (
    DELETE FROM facts AS f
    WHERE f.project_id = :project_id
      AND f.subject_id = :subject_id
    RETURNING f.fact_id
),
gone_events AS (
    DELETE FROM events AS e
    WHERE e.project_id = :project_id
      AND e.subject_id = :subject_id
    RETURNING e.event_id
),
gone_calls AS (
    -- A call's decisions go with its row (migration 0026), counted from its arrays.
    DELETE FROM context_calls AS c
    WHERE c.project_id = :project_id
      AND c.subject_id = :subject_id
    RETURNING c.trace_id, coalesce(cardinality(c.decision_ids), 0) AS decisions
),
gone_decisions AS (
    -- Calls traced before migration 0026 keep their decisions in context_traces.
    DELETE FROM context_traces AS t
    USING gone_calls AS g
    WHERE t.project_id = :project_id
      AND t.trace_id = g.trace_id
    RETURNING t.ord
),
gone_ids AS (
    -- A column, so haki_response_names (migration 0042) inlines; read once, so it is an InitPlan
    -- and its ids are hashed once for all the project's records.
    SELECT ARRAY(
               SELECT gf.fact_id FROM gone_facts AS gf
               UNION ALL
               SELECT ge.event_id FROM gone_events AS ge
           ) AS ids
),
gone_keys AS (
    DELETE FROM idempotency_keys AS k
    WHERE k.project_id = :project_id
      -- The scope's records, and those claimed before migration 0042, which have no scope.
      AND (k.subject_id = :subject_id OR k.subject_id IS NULL)
      AND EXISTS (
          SELECT 1
          FROM gone_ids AS g
          CROSS JOIN LATERAL public.haki_response_names(k.response, g.ids) AS n
      )
    RETURNING k.idempotency_key
),
counts AS (
    SELECT (SELECT count(*) FROM gone_facts) AS facts,
           (SELECT count(*) FROM gone_events) AS events,
           (SELECT count(*) FROM gone_sets) AS conflict_sets,
           (SELECT count(*) FROM gone_members) AS conflict_members,
           (SELECT count(*) FROM gone_calls) AS context_calls,
           (SELECT count(*) FROM gone_decisions)
               + (SELECT coalesce(sum(g.decisions), 0) FROM gone_calls AS g)::bigint AS decisions,
           (SELECT count(*) FROM gone_keys) AS idempotency_keys
),
-- Pending webhook events that carry the subject's content go with it (migration 0027); the
-- subject.erased event carries the counts only.
gone_notices AS (
    DELETE FROM webhook_outbox AS o
    WHERE o.project_id = :project_id
      AND o.subject_id = :subject_id
      AND o.content IS NOT NULL
    RETURNING o.event_id
),
notice AS (
    INSERT INTO webhook_outbox (project_id, subject_id, kind, data)
    SELECT :project_id, :subject_id, 'subject.erased',
           jsonb_build_object('subject_id', :subject_id::text, 'erasure_id', :erasure_id::uuid,
                              'facts', n.facts, 'events', n.events, 'conflict_sets', n.conflict_sets,
                              'conflict_members', n.conflict_members, 'context_calls', n.context_calls,
                              'decisions', n.decisions, 'idempotency_keys', n.idempotency_keys,
                              'webhook_events', (SELECT count(*) FROM gone_notices))
    FROM counts AS n
    WHERE public.haki_webhook_wants(:project_id, 'subject.erased') IS NOT NULL
    RETURNING event_id
),
audit AS (
    INSERT INTO erasures (
        project_id, erasure_id, subject_id, kind, facts, events, conflict_sets, conflict_members,
        context_calls, decisions, idempotency_keys, key_id
    )
    SELECT :project_id, :erasure_id, :subject_id, 'subject', n.facts, n.events, n.conflict_sets,
           n.conflict_members, n.context_calls, n.decisions, n.idempotency_keys, :key_id
    FROM counts AS n
    RETURNING erased_at
)
SELECT n.facts, n.events, n.conflict_sets, n.conflict_members, n.context_calls, n.decisions,
       n.idempotency_keys, a.erased_at
FROM counts AS n
CROSS JOIN audit AS a;

-- name: erase_memory(project_id, kind, item_id, erasure_id, key_id)^
-- Erases one memory, a fact or an event (kind `fact` or `event`), and audits it. Either way the
-- decisions that name it in the traces of its scope go (read through the scope's calls: an index
-- on decisions by item would cost every trace write). A fact also loses its conflict memberships
-- (an open set left with fewer than two claims, haki_conflict_claims, is resolved; a set left
-- empty goes) and the `supersedes` links that point at it (null); the facts extracted from an
-- event keep their text and lose the link (source_event_id null), and the event after it loses
-- its vector in context. The Idempotency-Key records whose stored response names it go too, as
-- in erase_subject: a retry of its write or extraction would replay it. NULL when no such memory.
-- Keeps a copy of open conflict: it does not ask whether a fact is held back by an open set, it
-- closes the set the erasure leaves with fewer than two claims, so it reads the set's status itself.
WITH locked_fact AS (
    SELECT f.fact_id, f.subject_id
    FROM facts AS f
    WHERE :kind::text = 'fact'
      AND f.project_id = :project_id
      AND f.fact_id = :item_id
    FOR UPDATE
),
locked_event AS (
    SELECT e.event_id, e.subject_id, e.occurred_at
    FROM events AS e
    WHERE :kind::text = 'event'
      AND e.project_id = :project_id
      AND e.event_id = :item_id
    FOR UPDATE
),
target AS (
    -- Traces name an event an `episode`.
    SELECT 'fact' AS kind, 'fact' AS trace_item_type, l.fact_id AS item_id, l.subject_id
    FROM locked_fact AS l
    UNION ALL
    SELECT 'event' AS kind, 'episode' AS trace_item_type, l.event_id AS item_id, l.subject_id
    FROM locked_event AS l
),
gone_members AS (
    DELETE FROM conflict_members AS cm
    USING target AS x
    WHERE cm.project_id = :project_id
      AND x.kind = 'fact'
      AND cm.fact_id = x.item_id
    RETURNING cm.conflict_set_id
),
left_members AS (
    SELECT g.conflict_set_id, count(m.fact_id) AS members,
           public.haki_conflict_claims(:project_id, g.conflict_set_id, :item_id) AS claims
    FROM gone_members AS g
    LEFT JOIN conflict_members AS m
      ON m.project_id = :project_id
     AND m.conflict_set_id = g.conflict_set_id
     AND m.fact_id <> :item_id
    GROUP BY g.conflict_set_id
),
resolved AS (
    UPDATE conflict_sets AS cs
    SET status = 'resolved',
        resolved_at = now()
    FROM left_members AS l
    WHERE cs.project_id = :project_id
      AND cs.conflict_set_id = l.conflict_set_id
      AND cs.status = 'open'
      AND l.members > 0
      AND l.claims < 2
    RETURNING cs.conflict_set_id
),
gone_sets AS (
    DELETE FROM conflict_sets AS cs
    USING left_members AS l
    WHERE cs.project_id = :project_id
      AND cs.conflict_set_id = l.conflict_set_id
      AND l.members = 0
    RETURNING cs.conflict_set_id
),
unlinked_supersedes AS (
    UPDATE facts AS s
    SET supersedes = NULL
    FROM target AS x
    WHERE s.project_id = :project_id
      AND x.kind = 'fact'
      AND s.subject_id = x.subject_id
      AND s.supersedes = x.item_id
    RETURNING s.fact_id
),
unlinked_sources AS (
    UPDATE facts AS s
    SET source_event_id = NULL
    FROM target AS x
    WHERE s.project_id = :project_id
      AND x.kind = 'event'
      AND s.subject_id = x.subject_id
      AND s.source_event_id = x.item_id
    RETURNING s.fact_id
),
gone_old_decisions AS (
    -- Calls traced before migration 0026 keep their decisions in context_traces.
    DELETE FROM context_traces AS t
    USING context_calls AS c, target AS x
    WHERE c.project_id = :project_id
      AND c.subject_id = x.subject_id
      AND t.project_id = c.project_id
      AND t.trace_id = c.trace_id
      AND t.item_type = x.trace_item_type
      AND t.item_id = x.item_id
    RETURNING t.ord
),
pruned AS (
    -- The compact form (migration 0026): each call of the scope naming the item keeps the other
    -- elements of its arrays, in their order, and its groups' counts (haki_trace_codes.part).
    SELECT c.trace_id, k.removed, k.ids, k.positions, k.codes, k.ranks, k.tokens, k.distances,
           k.text_ranks, k.recencies,
           CASE WHEN c.decision_scores IS NOT NULL THEN k.scores END AS scores,
           CASE WHEN c.decision_similarities IS NOT NULL THEN k.similarities END AS similarities,
           k.served, k.over_budget, k.below_floor
    FROM context_calls AS c
    CROSS JOIN target AS x
    CROSS JOIN LATERAL (
        SELECT cardinality(c.decision_ids) - count(*) AS removed,
               coalesce(array_agg(u.item_id ORDER BY u.n), '{}'::uuid[]) AS ids,
               coalesce(array_agg(u.position ORDER BY u.n), '{}'::integer[]) AS positions,
               coalesce(array_agg(u.code ORDER BY u.n), '{}'::smallint[]) AS codes,
               coalesce(array_agg(u.rank ORDER BY u.n), '{}'::smallint[]) AS ranks,
               coalesce(array_agg(u.tokens ORDER BY u.n), '{}'::smallint[]) AS tokens,
               coalesce(array_agg(u.distance ORDER BY u.n), '{}'::float8[]) AS distances,
               coalesce(array_agg(u.text_rank ORDER BY u.n), '{}'::float8[]) AS text_ranks,
               coalesce(array_agg(u.recency ORDER BY u.n), '{}'::float8[]) AS recencies,
               coalesce(array_agg(u.score ORDER BY u.n), '{}'::float8[]) AS scores,
               coalesce(array_agg(u.similarity ORDER BY u.n), '{}'::float8[]) AS similarities,
               count(*) FILTER (WHERE tc.part = 1) AS served,
               count(*) FILTER (WHERE tc.part = 2) AS over_budget,
               count(*) FILTER (WHERE tc.part = 3) AS below_floor
        FROM unnest(c.decision_ids,
                    coalesce(c.decision_positions_wide, c.decision_positions::integer[]),
                    c.decision_codes, c.decision_ranks,
                    c.decision_tokens, c.decision_distances, c.decision_text_ranks,
                    c.decision_recencies, c.decision_scores, c.decision_similarities)
            WITH ORDINALITY AS u(item_id, position, code, rank, tokens, distance, text_rank,
                                 recency, score, similarity, n)
        JOIN public.haki_trace_codes() AS tc ON tc.code = u.code
        WHERE NOT (u.item_id = x.item_id AND tc.item_type = x.trace_item_type)
    ) AS k
    WHERE c.project_id = :project_id
      AND c.subject_id = x.subject_id
      AND c.decision_ids @> ARRAY[x.item_id]
),
pruned_calls AS (
    UPDATE context_calls AS c
    SET decision_ids = p.ids,
        -- In the column it came from (migration 0043).
        decision_positions = CASE WHEN c.decision_positions_wide IS NULL THEN p.positions::smallint[] END,
        decision_positions_wide = CASE WHEN c.decision_positions_wide IS NOT NULL THEN p.positions END,
        decision_codes = p.codes,
        decision_ranks = p.ranks, decision_tokens = p.tokens, decision_distances = p.distances,
        decision_text_ranks = p.text_ranks, decision_recencies = p.recencies,
        decision_scores = p.scores, decision_similarities = p.similarities,
        decision_served = p.served, decision_over_budget = p.over_budget,
        decision_below_floor = p.below_floor
    FROM pruned AS p
    WHERE c.project_id = :project_id
      AND c.trace_id = p.trace_id
    RETURNING p.removed
),
gone_facts AS (
    DELETE FROM facts AS f
    USING target AS x
    WHERE f.project_id = :project_id
      AND x.kind = 'fact'
      AND f.fact_id = x.item_id
    RETURNING f.subject_id
),
gone_events AS (
    DELETE FROM events AS e
    USING target AS x
    WHERE e.project_id = :project_id
      AND x.kind = 'event'
      AND e.event_id = x.item_id
    RETURNING e.subject_id
),
unlinked_context AS (
    -- The event after an erased one has a vector made with its text (migration 0035): it goes,
    -- and the event context worker makes it again from the new predecessor.
    UPDATE events AS n
    SET context_embedding = NULL
    FROM locked_event AS l
    CROSS JOIN LATERAL public.haki_event_after(:project_id, l.subject_id, l.occurred_at,
                                               l.event_id) AS a
    WHERE n.project_id = :project_id
      AND n.event_id = a.event_id
    RETURNING n.event_id
),
-- Pending webhook events that carry the fact's content go with it (migration 0027).
gone_notices AS (
    DELETE FROM webhook_outbox AS o
    USING target AS x
    WHERE o.project_id = :project_id
      AND x.kind = 'fact'
      AND o.subject_id = x.subject_id
      AND o.content IS NOT NULL
      AND x.item_id = ANY (o.fact_ids)
    RETURNING o.event_id
),
gone_keys AS (
    DELETE FROM idempotency_keys AS k
    USING target AS x
    WHERE k.project_id = :project_id
      -- The scope's records, and those claimed before migration 0042, which have no scope.
      AND (k.subject_id = x.subject_id OR k.subject_id IS NULL)
      AND EXISTS (
          SELECT 1
          FROM public.haki_response_names(k.response, ARRAY[x.item_id]) AS n
      )
    RETURNING k.idempotency_key
),
gone AS (
    SELECT g.subject_id FROM gone_facts AS g
    UNION ALL
    SELECT g.subject_id FROM gone_events AS g
),
audit AS (
    INSERT INTO erasures (
        project_id, erasure_id, subject_id, kind, facts, events, conflict_sets, conflict_members,
        decisions, idempotency_keys, key_id
    )
    SELECT :project_id, :erasure_id, g.subject_id, :kind, (SELECT count(*) FROM gone_facts),
           (SELECT count(*) FROM gone_events), (SELECT count(*) FROM gone_sets),
           (SELECT count(*) FROM gone_members),
           (SELECT count(*) FROM gone_old_decisions)
               + (SELECT coalesce(sum(p.removed), 0) FROM pruned_calls AS p)::bigint,
           (SELECT count(*) FROM gone_keys), :key_id
    FROM gone AS g
    RETURNING erased_at, subject_id
)
SELECT (SELECT count(*) FROM gone_members) AS conflict_members,
       (SELECT count(*) FROM resolved) AS conflict_sets_resolved,
       (SELECT count(*) FROM gone_sets) AS conflict_sets,
       (SELECT count(*) FROM unlinked_supersedes) AS supersedes_unlinked,
       (SELECT count(*) FROM unlinked_sources) AS facts_unlinked,
       (SELECT count(*) FROM gone_old_decisions)
           + (SELECT coalesce(sum(p.removed), 0) FROM pruned_calls AS p)::bigint AS decisions,
       (SELECT count(*) FROM gone_keys) AS idempotency_keys, a.erased_at, a.subject_id
FROM audit AS a;

-- name: list_context_call_projects()
-- The projects that hold context calls, for the retention purge to visit one by one: a skip scan
-- of the calls' primary key (one index probe per project), project ids only.
WITH RECURSIVE p AS (
    (SELECT c.project_id FROM context_calls AS c ORDER BY c.project_id LIMIT 1)
    UNION ALL
    SELECT (
        SELECT c.project_id
        FROM context_calls AS c
        WHERE c.project_id > p.project_id
        ORDER BY c.project_id
        LIMIT 1
    )
    FROM p
    WHERE p.project_id IS NOT NULL
)
SELECT p.project_id
FROM p
WHERE p.project_id IS NOT NULL;

-- name: purge_expired_context_calls(project_id, retention_days, max_calls)^
-- One bounded batch of trace retention: deletes up to max_calls context calls of a project made
-- more than retention_days ago, oldest first, with their decisions (the call's arrays, and the
-- context_traces rows of calls traced before migration 0026). Calls another transaction holds
-- are skipped, so the purge never waits on a request. Returns the calls and decisions deleted.
WITH doomed AS (
    SELECT c.project_id, c.trace_id
    FROM context_calls AS c
    WHERE c.project_id = :project_id
      AND c.created_at < now() - make_interval(days => :retention_days)
    ORDER BY c.created_at
    LIMIT :max_calls
    FOR UPDATE SKIP LOCKED
),
gone_decisions AS (
    DELETE FROM context_traces AS t
    USING doomed AS d
    WHERE t.project_id = :project_id
      AND t.project_id = d.project_id
      AND t.trace_id = d.trace_id
    RETURNING t.ord
),
gone_calls AS (
    DELETE FROM context_calls AS c
    USING doomed AS d
    WHERE c.project_id = :project_id
      AND c.project_id = d.project_id
      AND c.trace_id = d.trace_id
    RETURNING c.trace_id, coalesce(cardinality(c.decision_ids), 0) AS decisions
)
SELECT (SELECT count(*) FROM gone_calls) AS context_calls,
       (SELECT count(*) FROM gone_decisions)
           + (SELECT coalesce(sum(g.decisions), 0) FROM gone_calls AS g)::bigint AS decisions;

-- name: get_event(project_id, event_id)^
-- One event of a project (GET /v1/events/{event_id}).
SELECT e.event_id, e.project_id, e.subject_id, e.content, e.occurred_at, e.recorded_at, e.metadata
FROM events AS e
WHERE e.project_id = :project_id
  AND e.event_id = :event_id;

-- name: list_events(project_id, subject_id, after_id, page_size)
-- One page of a project's events in id (= creation) order after the cursor, optionally of one
-- subject (GET /v1/events; the export reads the same pages).
SELECT e.event_id, e.project_id, e.subject_id, e.content, e.occurred_at, e.recorded_at, e.metadata
FROM events AS e
WHERE e.project_id = :project_id
  AND (:subject_id::text IS NULL OR e.subject_id = :subject_id)
  AND (:after_id::uuid IS NULL OR e.event_id > :after_id)
ORDER BY e.event_id
LIMIT :page_size;

-- name: list_subjects(project_id, after_subject, page_size)
-- One page of the subjects of a project in id order after the cursor, with their fact and event
-- counts and the last time either was written (GET /v1/subjects). Reads the page's subjects
-- only: page_size steps from one subject id to the next (haki_next_subject, a loose index scan
-- of facts and events), then each subject's rows through its scope indexes
-- (haki_subject_summary, migration 0018). Grouping every row of the project after the cursor
-- took 63 ms for a page of 3 at 106k facts, and grew with the project (docs/scaling.md).
WITH RECURSIVE page (subject_id, n) AS (
    SELECT public.haki_next_subject(:project_id, :after_subject), 1
    UNION ALL
    SELECT public.haki_next_subject(:project_id, p.subject_id), p.n + 1
    FROM page AS p
    WHERE p.subject_id IS NOT NULL
      AND p.n < :page_size
)
SELECT p.subject_id, s.facts, s.events, s.last_write_at
FROM page AS p
CROSS JOIN LATERAL public.haki_subject_summary(:project_id, p.subject_id) AS s
WHERE p.subject_id IS NOT NULL
ORDER BY p.subject_id;

-- name: export_facts(project_id, subject_id, after_id, page_size)
-- One page of a scope's facts of every status in id order, with every column a re-import needs
-- (the export of GET /v1/subjects/{subject_id}/export).
SELECT f.fact_id, f.content, f.key, f.status, f.valid_from, f.valid_to, f.believed_valid_to,
       f.recorded_from, f.recorded_to, f.volatility,
       extract(epoch FROM f.stale_after)::bigint AS stale_after_seconds,
       f.supersedes, f.source_event_id, f.metadata,
       (SELECT cs.conflict_set_id
        FROM conflict_members AS cm
        JOIN conflict_sets AS cs
          ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
        WHERE cm.project_id = f.project_id AND cm.fact_id = f.fact_id
        ORDER BY cs.created_at DESC
        LIMIT 1) AS conflict_set_id
FROM facts AS f
WHERE f.project_id = :project_id
  AND f.subject_id = :subject_id
  AND (:after_id::uuid IS NULL OR f.fact_id > :after_id)
ORDER BY f.fact_id
LIMIT :page_size;

-- name: export_conflict_sets(project_id, subject_id, after_id, page_size)
-- One page of a scope's conflict sets of either status in id order, each with its members' ids
-- (the export's `"kind": "conflict_set"` lines): what a re-import recreates as it was.
SELECT cs.conflict_set_id, cs.key, cs.status, cs.created_at, cs.resolved_at,
       array(
           SELECT cm.fact_id
           FROM conflict_members AS cm
           WHERE cm.project_id = cs.project_id AND cm.conflict_set_id = cs.conflict_set_id
           ORDER BY cm.fact_id
       ) AS members
FROM conflict_sets AS cs
WHERE cs.project_id = :project_id
  AND cs.subject_id = :subject_id
  AND (:after_id::uuid IS NULL OR cs.conflict_set_id > :after_id)
ORDER BY cs.conflict_set_id
LIMIT :page_size;

-- name: use_custom_plans()$
-- Plans the rest of the current transaction's statements for their parameters (repository.base
-- custom_plans): a statement whose right index depends on which of its optional filters is given
-- (list_conflicts) could get a generic plan from the connection's plan cache after five calls,
-- a seq scan and a sort of the whole project (benchmarks/conflict_sets.py); planning is cheaper.
SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS plan_cache_mode;

-- name: extend_statement_timeout(timeout_ms)$
-- Raises statement_timeout for the rest of the current transaction only, for work that grows
-- with its input (repository.base.long_transaction: an erasure, a batch write, a re-embedding).
SELECT set_config('statement_timeout', (:timeout_ms::integer)::text, true) AS statement_timeout;
