-- Benchmark-only statements of benchmarks/gin_pending.py: the four index modes it compares.
-- Not production SQL: the mode that ships is set by migration 0013.

-- name: gin_mode_off#
-- fastupdate off on the four scoped GIN indexes of facts and events.
ALTER INDEX facts_scoped_search_gin SET (fastupdate = off);
ALTER INDEX facts_scoped_english_gin SET (fastupdate = off);
ALTER INDEX events_scoped_search_gin SET (fastupdate = off);
ALTER INDEX events_scoped_english_gin SET (fastupdate = off);

-- name: gin_mode_small#
-- fastupdate on with the smallest pending list PostgreSQL allows (64 kB).
ALTER INDEX facts_scoped_search_gin SET (fastupdate = on, gin_pending_list_limit = 64);
ALTER INDEX facts_scoped_english_gin SET (fastupdate = on, gin_pending_list_limit = 64);
ALTER INDEX events_scoped_search_gin SET (fastupdate = on, gin_pending_list_limit = 64);
ALTER INDEX events_scoped_english_gin SET (fastupdate = on, gin_pending_list_limit = 64);

-- name: gin_mode_pending#
-- fastupdate on with the server's default pending list (gin_pending_list_limit = 4 MB).
ALTER INDEX facts_scoped_search_gin SET (fastupdate = on);
ALTER INDEX facts_scoped_search_gin RESET (gin_pending_list_limit);
ALTER INDEX facts_scoped_english_gin SET (fastupdate = on);
ALTER INDEX facts_scoped_english_gin RESET (gin_pending_list_limit);
ALTER INDEX events_scoped_search_gin SET (fastupdate = on);
ALTER INDEX events_scoped_search_gin RESET (gin_pending_list_limit);
ALTER INDEX events_scoped_english_gin SET (fastupdate = on);
ALTER INDEX events_scoped_english_gin RESET (gin_pending_list_limit);

-- name: gin_clean_all()$
-- Moves every pending entry of the four indexes into their posting trees (the `clean` mode).
SELECT gin_clean_pending_list('facts_scoped_search_gin'::regclass)
     + gin_clean_pending_list('facts_scoped_english_gin'::regclass)
     + gin_clean_pending_list('events_scoped_search_gin'::regclass)
     + gin_clean_pending_list('events_scoped_english_gin'::regclass) AS pages_cleaned;

-- name: vacuum_memory#
-- Starts each mode from flushed pending lists and fresh statistics.
VACUUM (ANALYZE) facts, events;
