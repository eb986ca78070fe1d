-- The context call log and its decision trace (GET /v1/inspect, GET /v1/stats/overview).

CREATE TABLE context_calls (
    project_id       text         NOT NULL,
    trace_id         uuid         NOT NULL,
    subject_id       text         NOT NULL,
    query            text         NOT NULL,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    budget_tokens    bigint       NOT NULL,
    used_tokens      bigint       NOT NULL,
    status           text         NOT NULL CHECK (status IN ('ok', 'degraded')),
    warnings         text[]       NOT NULL DEFAULT '{}',
    empty_reason     text,
    facts_served     integer      NOT NULL DEFAULT 0,
    episodes_served  integer      NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, trace_id)
);
CREATE INDEX context_calls_recent ON context_calls (project_id, subject_id, created_at DESC);

CREATE TABLE context_traces (
    project_id       text              NOT NULL,
    trace_id         uuid              NOT NULL,
    ord              integer           NOT NULL,
    item_type        text              NOT NULL CHECK (item_type IN ('fact', 'episode')),
    item_id          uuid              NOT NULL,
    decision         text              NOT NULL CHECK (decision IN ('included', 'excluded', 'blocked')),
    reason_code      text              NOT NULL,
    rank             integer,
    score            double precision,
    similarity       double precision,
    text_rank        double precision,
    recency          double precision,
    cosine_distance  double precision,
    tokens           integer           NOT NULL,
    PRIMARY KEY (project_id, trace_id, ord),
    FOREIGN KEY (project_id, trace_id) REFERENCES context_calls (project_id, trace_id)
);
