-- Memory lifecycle (issue 14): erasure, trace retention, listing and export.

-- The audit of every erasure (DELETE /v1/subjects/{id}, /v1/facts/{id}, /v1/events/{id}): which
-- scope, how many rows of each kind went, when, and the key that asked. It holds no content: no
-- text, no metadata, no ids of the erased rows. The subject id stays: it is what the erasure was
-- asked for, and proof that it was honoured (docs/reliability.md, "Erasure").
CREATE TABLE erasures (
    project_id        text         NOT NULL,
    erasure_id        uuid         NOT NULL,
    subject_id        text         NOT NULL,
    kind              text         NOT NULL CHECK (kind IN ('subject', 'fact', 'event')),
    facts             bigint       NOT NULL DEFAULT 0,
    events            bigint       NOT NULL DEFAULT 0,
    conflict_sets     bigint       NOT NULL DEFAULT 0,
    conflict_members  bigint       NOT NULL DEFAULT 0,
    context_calls     bigint       NOT NULL DEFAULT 0,
    decisions         bigint       NOT NULL DEFAULT 0,
    idempotency_keys  bigint       NOT NULL DEFAULT 0,
    erased_at         timestamptz  NOT NULL DEFAULT now(),
    key_id            uuid         NOT NULL,
    PRIMARY KEY (project_id, erasure_id)
);

-- Trace retention (HAKI_TRACE_RETENTION_DAYS): the purge reads a project's oldest calls first,
-- a bounded batch at a time. context_calls_recent leads with subject_id, so without this index
-- each batch read every call of the project.
CREATE INDEX context_calls_created ON context_calls (project_id, created_at);

-- GET /v1/events lists a project's events in id (creation) order, as facts_scope_id does for
-- facts; events_scope_occurred orders by occurred_at.
CREATE INDEX events_scope_id ON events (project_id, subject_id, event_id);
