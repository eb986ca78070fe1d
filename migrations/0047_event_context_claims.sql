-- Claims on the events whose vectors in context a process is making (service/memory/event_context.py):
-- every serving process's worker and a write's inline step claim a batch before they embed it, so
-- that one text is embedded once, not once per process. A claim lasts until claimed_until (a
-- process that died mid-batch leaves its events to be claimed again after it) or until the store
-- of its batch deletes it. Apart from the events, so that a claim never rewrites an event's row
-- and its HNSW index entries.
CREATE TABLE public.event_context_claims (
    project_id    text        NOT NULL,
    event_id      uuid        NOT NULL,
    claimed_until timestamptz NOT NULL,
    PRIMARY KEY (project_id, event_id)
);
