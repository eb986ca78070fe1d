-- Full-text side of the hybrid score (spec: "search_vector is a generated column (migration 0004)"):
-- the tsvector is built once at write time, never re-parsed per query.
ALTER TABLE facts
    ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED;
CREATE INDEX facts_search_vector_gin ON facts USING gin (search_vector);
