-- A claim on an event's vector in context (migration 0047) goes with its event, as
-- reembedded_events' rows do (migration 0030): every path that deletes an event, an erasure
-- first, leaves no claim naming it. Claims on events already gone are dropped first.
DELETE FROM event_context_claims AS c
WHERE NOT EXISTS (
    SELECT 1
    FROM events AS e
    WHERE e.project_id = c.project_id
      AND e.event_id = c.event_id
);

ALTER TABLE event_context_claims
    ADD FOREIGN KEY (project_id, event_id) REFERENCES events (project_id, event_id) ON DELETE CASCADE;
