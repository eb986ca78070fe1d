-- name: ping()$
-- Readiness probe: the database answers.
SELECT 1 AS ok;

-- name: probe_vector_setup#
-- The vector probe's graph, inside the caller's transaction (rolled back): pgvector loaded, a
-- temporary HNSW index built over 8 rows of 384 dimensions, so each insert after the first
-- computes distances, as Haki's writes do; sequential scans off, so the search walks the graph.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TEMPORARY TABLE haki_vector_probe (
    id        integer     PRIMARY KEY,
    embedding vector(384) NOT NULL
) ON COMMIT DROP;
CREATE INDEX haki_vector_probe_hnsw ON haki_vector_probe USING hnsw (embedding vector_cosine_ops);
INSERT INTO haki_vector_probe (id, embedding)
SELECT g.id,
       (SELECT array_agg(sin(g.id * d.i))::vector(384) FROM generate_series(1, 384) AS d(i)) AS embedding
FROM generate_series(1, 8) AS g(id);
SET LOCAL enable_seqscan = off;

-- name: probe_vector_search()^
-- The vector probe's reads: an HNSW search, and cosine distances on `vector` and `halfvec`, the
-- operations Haki's hot path runs.
WITH probe AS (
    SELECT p.embedding AS embedding
    FROM haki_vector_probe AS p
    WHERE p.id = 3
)
SELECT (SELECT h.id
        FROM haki_vector_probe AS h
        ORDER BY h.embedding <=> (SELECT probe.embedding FROM probe)
        LIMIT 1) AS nearest_id,
       (SELECT max(v.embedding <=> probe.embedding) FROM haki_vector_probe AS v, probe) AS max_distance,
       (SELECT max(v.embedding::halfvec(384) <=> probe.embedding::halfvec(384))
        FROM haki_vector_probe AS v, probe) AS max_half_distance;

-- name: vector_extension()^
-- pgvector's version in this database, and the version its installed files offer (NULL where
-- the extension is not available at all).
SELECT (SELECT e.extversion FROM pg_extension AS e WHERE e.extname = 'vector') AS installed_version,
       (SELECT a.default_version FROM pg_available_extensions AS a WHERE a.name = 'vector') AS available_version;

-- name: update_vector_extension#
-- Brings pgvector's SQL objects to the version of its shared library (the embedded server only,
-- after its distribution moved to a newer pgvector; a no-op when they already agree).
ALTER EXTENSION vector UPDATE;
