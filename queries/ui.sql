-- Statements of the /ui pages: the trace inspector (/ui/traces), the memory browser (/ui/subjects,
-- /ui/facts, /ui/conflicts) and its server-side sessions (migration 0028).

-- name: list_recent_context_calls(project_id, subject_id, page_size)
-- The latest context calls of a project, newest first, optionally of one subject only.
SELECT c.trace_id, c.subject_id, c.query, c.created_at, c.budget_tokens, c.used_tokens, c.status,
       c.warnings, c.empty_reason, c.facts_served, c.episodes_served
FROM context_calls AS c
WHERE c.project_id = :project_id
  AND (:subject_id::text IS NULL OR c.subject_id = :subject_id)
ORDER BY c.created_at DESC, c.trace_id DESC
LIMIT :page_size;

-- name: create_ui_session(project_id, session_hash, key_id, csrf_token, expires_at)!
-- Opens a /ui session of one key; the cookie holds the secret whose SHA-256 is session_hash.
INSERT INTO ui_sessions (project_id, session_hash, key_id, csrf_token, expires_at)
VALUES (:project_id, :session_hash, :key_id, :csrf_token, :expires_at);

-- name: get_ui_session(project_id, session_hash)^
-- The key and CSRF token of a live session: not expired, and its key not revoked.
SELECT s.key_id, s.csrf_token, s.expires_at
FROM ui_sessions AS s
JOIN api_keys AS k
  ON k.project_id = s.project_id AND k.key_id = s.key_id
WHERE s.project_id = :project_id
  AND s.session_hash = :session_hash
  AND s.expires_at > now()
  AND k.revoked_at IS NULL;

-- name: delete_ui_session(project_id, session_hash)!
-- Ends one session (logout).
DELETE FROM ui_sessions AS s
WHERE s.project_id = :project_id
  AND s.session_hash = :session_hash;

-- name: delete_expired_ui_sessions(project_id)!
-- Forgets the project's expired sessions (run at each login, so the table stays small).
DELETE FROM ui_sessions AS s
WHERE s.project_id = :project_id
  AND s.expires_at <= now();

-- name: list_ui_subjects(project_id, search, after_subject, page_size)
-- One page of the subjects whose id holds `search` (any case; NULL for every subject), in id
-- order after the cursor, with their counts, last write, open conflicts and last context call.
-- Steps from one subject id to the next (haki_next_subject, a loose index scan) until the page
-- is full, so a search reads the subject ids it passes, never the subjects' rows.
WITH RECURSIVE walk (subject_id, matched) AS (
    SELECT first_subject.subject_id,
           (:search::text IS NULL OR strpos(lower(first_subject.subject_id), lower(:search)) > 0)::int
    FROM (SELECT public.haki_next_subject(:project_id, :after_subject) AS subject_id) AS first_subject
    UNION ALL
    SELECT next_subject.subject_id,
           w.matched
           + (:search::text IS NULL OR strpos(lower(next_subject.subject_id), lower(:search)) > 0)::int
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT public.haki_next_subject(:project_id, w.subject_id) AS subject_id
    ) AS next_subject
    WHERE w.subject_id IS NOT NULL
      AND w.matched < :page_size
)
SELECT w.subject_id, s.facts, s.events, s.last_write_at,
       (SELECT count(*)
        FROM conflict_sets AS cs
        WHERE cs.project_id = :project_id
          AND cs.subject_id = w.subject_id
          AND cs.status = 'open') AS open_conflicts,
       (SELECT max(c.created_at)
        FROM context_calls AS c
        WHERE c.project_id = :project_id
          AND c.subject_id = w.subject_id) AS last_call_at
FROM walk AS w
CROSS JOIN LATERAL public.haki_subject_summary(:project_id, w.subject_id) AS s
WHERE w.subject_id IS NOT NULL
  AND (:search::text IS NULL OR strpos(lower(w.subject_id), lower(:search)) > 0)
ORDER BY w.subject_id;

-- name: list_conflict_sets_of_facts(project_id, fact_ids)
-- For each of these facts, the latest conflict set it is a member of (the open one, when it is
-- in one: a fact joins a new set only after its earlier ones were resolved). The trace page
-- links a fact blocked as conflict_open to it.
SELECT DISTINCT ON (cm.fact_id) cm.fact_id, cs.conflict_set_id
FROM conflict_members AS cm
JOIN conflict_sets AS cs
  ON cs.project_id = cm.project_id AND cs.conflict_set_id = cm.conflict_set_id
WHERE cm.project_id = :project_id
  AND cm.fact_id = ANY(:fact_ids::uuid[])
ORDER BY cm.fact_id, cs.created_at DESC, cs.conflict_set_id DESC;

-- name: get_ui_subject(project_id, subject_id)^
-- One subject's counts, last write, open conflicts and last context call (its page's header and
-- the erase confirmation); zero counts when it holds nothing.
SELECT :subject_id::text AS subject_id, s.facts, s.events, s.last_write_at,
       (SELECT count(*)
        FROM conflict_sets AS cs
        WHERE cs.project_id = :project_id
          AND cs.subject_id = :subject_id
          AND cs.status = 'open') AS open_conflicts,
       (SELECT max(c.created_at)
        FROM context_calls AS c
        WHERE c.project_id = :project_id
          AND c.subject_id = :subject_id) AS last_call_at
FROM public.haki_subject_summary(:project_id, :subject_id) AS s;
