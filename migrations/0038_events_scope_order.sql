-- A scope's events in one total order, (occurred_at, event_id), read from one index: the
-- statistics sample's newest events (haki_scope_sample, ties by the greater id) and an event's
-- neighbours (haki_event_before, haki_event_after, migration 0035). On (occurred_at) alone an
-- instant shared by many events (a batch written with one timestamp) was read whole and sorted
-- to find the newest 256, or the one before: a cost that grew with the scope, which rule 1 of
-- docs/spec/context-profiles.md forbids. The new index serves every reader of the old one
-- (its prefix), which goes. Built inside this migration's transaction: writes of events wait
-- for it (a btree, one pass over the table).
CREATE INDEX events_scope_occurred_id ON public.events (project_id, subject_id, occurred_at, event_id);
DROP INDEX public.events_scope_occurred;
