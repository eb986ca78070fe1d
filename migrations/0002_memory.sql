-- Core memory tables. Every table leads its primary key with project_id (the tenant and the
-- distribution column for Citus), and every query filters on it.

CREATE TABLE api_keys (
    project_id  text        NOT NULL,
    key_id      uuid        NOT NULL,
    key_hash    bytea       NOT NULL,
    label       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    PRIMARY KEY (project_id, key_id)
);
-- Authentication looks a key up by its hash only (the key names no project).
CREATE UNIQUE INDEX api_keys_key_hash ON api_keys (key_hash);

CREATE TABLE events (
    project_id   text         NOT NULL,
    event_id     uuid         NOT NULL,
    subject_id   text         NOT NULL,
    content      text         NOT NULL,
    occurred_at  timestamptz  NOT NULL,
    recorded_at  timestamptz  NOT NULL DEFAULT now(),
    metadata     jsonb        NOT NULL DEFAULT '{}'::jsonb,
    embedding    vector(384)  NOT NULL,
    PRIMARY KEY (project_id, event_id)
);
CREATE INDEX events_scope_occurred ON events (project_id, subject_id, occurred_at);
CREATE INDEX events_embedding_hnsw ON events USING hnsw (embedding vector_cosine_ops);

CREATE TABLE facts (
    project_id       text         NOT NULL,
    fact_id          uuid         NOT NULL,
    subject_id       text         NOT NULL,
    content          text         NOT NULL,
    key              text,
    status           text         NOT NULL DEFAULT 'active'
                                  CHECK (status IN ('active', 'superseded', 'retracted')),
    valid_from       timestamptz,
    valid_to         timestamptz,
    recorded_from    timestamptz  NOT NULL DEFAULT now(),
    volatility       text         NOT NULL DEFAULT 'stable'
                                  CHECK (volatility IN ('stable', 'volatile')),
    stale_after      interval,
    supersedes       uuid,
    source_event_id  uuid,
    metadata         jsonb        NOT NULL DEFAULT '{}'::jsonb,
    embedding        vector(384)  NOT NULL,
    PRIMARY KEY (project_id, fact_id),
    CHECK (valid_to IS NULL OR valid_from IS NULL OR valid_to > valid_from),
    CHECK (volatility = 'stable' OR stale_after IS NOT NULL)
);
-- Listing and keyset pagination within a scope (fact ids are UUIDv7, so id order is time order).
CREATE INDEX facts_scope_id ON facts (project_id, subject_id, fact_id);
-- Conflict detection: active facts of one key in one scope.
CREATE INDEX facts_scope_key_active ON facts (project_id, subject_id, key)
    WHERE status = 'active' AND key IS NOT NULL;
CREATE INDEX facts_embedding_hnsw ON facts USING hnsw (embedding vector_cosine_ops);

CREATE TABLE conflict_sets (
    project_id       text         NOT NULL,
    conflict_set_id  uuid         NOT NULL,
    subject_id       text         NOT NULL,
    key              text         NOT NULL,
    status           text         NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
    created_at       timestamptz  NOT NULL DEFAULT now(),
    resolved_at      timestamptz,
    PRIMARY KEY (project_id, conflict_set_id)
);
-- At most one open set per slot: a new clash joins it.
CREATE UNIQUE INDEX conflict_sets_one_open_per_key ON conflict_sets (project_id, subject_id, key)
    WHERE status = 'open';

CREATE TABLE conflict_members (
    project_id       text  NOT NULL,
    conflict_set_id  uuid  NOT NULL,
    fact_id          uuid  NOT NULL,
    PRIMARY KEY (project_id, conflict_set_id, fact_id),
    FOREIGN KEY (project_id, conflict_set_id) REFERENCES conflict_sets (project_id, conflict_set_id),
    FOREIGN KEY (project_id, fact_id) REFERENCES facts (project_id, fact_id)
);
CREATE INDEX conflict_members_fact ON conflict_members (project_id, fact_id);
