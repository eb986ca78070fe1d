-- Phase 1 of the Context Assembler walks one bucket of facts instead of the whole table, and the
-- episodes one bucket of events (docs/performance.md, "Scope buckets"). A scope-filtered walk of one HNSW graph over every
-- fact reads about top_k / selectivity index tuples: ~700 for a scope holding 10 % of the
-- table (~5 ms on 2 cores), and a scope's share of the table only shrinks as a deployment
-- grows. Each (project_id, subject_id) hashes to one of 16 buckets, and each bucket has its own
-- partial HNSW index, so a scope's selectivity inside its graph is 16 times its share of the
-- table on average. The context query names the bucket of its scope; the planner proves which
-- partial index that is (the vector walk is planned for its own parameters). The graphs hold
-- half-precision copies of the embeddings: half the memory and a faster walk for the same
-- recall@64 (0.998 against 0.997 on the benchmark world); scores still use the full vectors.

-- The number of buckets, one definition for the index predicates below and the context query.
CREATE FUNCTION public.haki_scope_buckets() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 16
$$;

-- The bucket of a scope: 0 .. 15. Inlined by the planner (one SELECT, no SET clause); names
-- are schema-qualified because index predicates run with a restricted search_path.
CREATE FUNCTION public.haki_scope_bucket(project_id text, subject_id text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT (pg_catalog.hashtextextended(project_id || chr(31) || subject_id, 0)
        & (public.haki_scope_buckets() - 1))::integer
$$;

SET LOCAL maintenance_work_mem = '512MB';
DROP INDEX facts_embedding_hnsw;
CREATE INDEX facts_embedding_hnsw_00 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 0;
CREATE INDEX facts_embedding_hnsw_01 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 1;
CREATE INDEX facts_embedding_hnsw_02 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 2;
CREATE INDEX facts_embedding_hnsw_03 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 3;
CREATE INDEX facts_embedding_hnsw_04 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 4;
CREATE INDEX facts_embedding_hnsw_05 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 5;
CREATE INDEX facts_embedding_hnsw_06 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 6;
CREATE INDEX facts_embedding_hnsw_07 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 7;
CREATE INDEX facts_embedding_hnsw_08 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 8;
CREATE INDEX facts_embedding_hnsw_09 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 9;
CREATE INDEX facts_embedding_hnsw_10 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 10;
CREATE INDEX facts_embedding_hnsw_11 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 11;
CREATE INDEX facts_embedding_hnsw_12 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 12;
CREATE INDEX facts_embedding_hnsw_13 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 13;
CREATE INDEX facts_embedding_hnsw_14 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 14;
CREATE INDEX facts_embedding_hnsw_15 ON facts USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 15;

-- Without it the planner multiplies the selectivity of the scope by the bucket's default 0.5 %
-- (the bucket is a function of the scope), expects ~50 rows from a 10,000-fact scope, and
-- sorts the whole scope instead of walking the bucket's index (64 ms instead of 2 ms).
CREATE STATISTICS facts_scope_bucket_stats (dependencies)
    ON project_id, subject_id, (public.haki_scope_bucket(project_id, subject_id)) FROM facts;
ANALYZE facts;

-- The same for the episodes: EPISODE_TOP_K events of the scope by cosine distance. Full
-- precision here: the planner sorts a small table's scope rather than walk its graph, and a
-- sort by the half-precision expression converted every vector (1.1 ms for 1,000 events).
DROP INDEX events_embedding_hnsw;
CREATE INDEX events_embedding_hnsw_00 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 0;
CREATE INDEX events_embedding_hnsw_01 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 1;
CREATE INDEX events_embedding_hnsw_02 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 2;
CREATE INDEX events_embedding_hnsw_03 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 3;
CREATE INDEX events_embedding_hnsw_04 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 4;
CREATE INDEX events_embedding_hnsw_05 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 5;
CREATE INDEX events_embedding_hnsw_06 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 6;
CREATE INDEX events_embedding_hnsw_07 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 7;
CREATE INDEX events_embedding_hnsw_08 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 8;
CREATE INDEX events_embedding_hnsw_09 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 9;
CREATE INDEX events_embedding_hnsw_10 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 10;
CREATE INDEX events_embedding_hnsw_11 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 11;
CREATE INDEX events_embedding_hnsw_12 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 12;
CREATE INDEX events_embedding_hnsw_13 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 13;
CREATE INDEX events_embedding_hnsw_14 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 14;
CREATE INDEX events_embedding_hnsw_15 ON events USING hnsw (embedding vector_cosine_ops)
    WHERE public.haki_scope_bucket(project_id, subject_id) = 15;
CREATE STATISTICS events_scope_bucket_stats (dependencies)
    ON project_id, subject_id, (public.haki_scope_bucket(project_id, subject_id)) FROM events;
ANALYZE events;
