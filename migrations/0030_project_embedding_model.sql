-- The embedding model of each project, and the vectors of a re-embedding in progress
-- (docs/quality.md, "Embedding model"; `haki reembed`).
--
-- A project's vectors are comparable only with a query embedded by the same model: the service
-- records the model (the embedder's name) with the project's first write, and refuses a context
-- call or a write whose embedder is another (embedding_model_mismatch). A project written before
-- this migration has no row until its next write records the writer's model.

CREATE TABLE project_embedding_models (
    project_id text NOT NULL,
    model text NOT NULL CHECK (length(model) BETWEEN 1 AND 500),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id)
);

-- The new model's vectors, written beside the served ones by `haki reembed` batch by batch (so a
-- run that stops resumes from them), swapped in by one transaction and then deleted. A row of
-- another model is the leftover of an abandoned run and is overwritten. Erasing a fact or an
-- event erases its pending vector too (the cascade).
CREATE TABLE reembedded_facts (
    project_id text NOT NULL,
    fact_id uuid NOT NULL,
    model text NOT NULL,
    embedding vector(384) NOT NULL,
    PRIMARY KEY (project_id, fact_id),
    FOREIGN KEY (project_id, fact_id) REFERENCES facts (project_id, fact_id) ON DELETE CASCADE
);

CREATE TABLE reembedded_events (
    project_id text NOT NULL,
    event_id uuid NOT NULL,
    model text NOT NULL,
    embedding vector(384) NOT NULL,
    PRIMARY KEY (project_id, event_id),
    FOREIGN KEY (project_id, event_id) REFERENCES events (project_id, event_id) ON DELETE CASCADE
);
