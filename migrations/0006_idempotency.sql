-- Idempotency-Key records of POST /v1/facts and POST /v1/events. A record is written in the same
-- transaction as the write it answers for, so a committed write always has its record (a retry
-- replays it) and a rolled-back write never leaves one (a retry runs again).

CREATE TABLE idempotency_keys (
    project_id       text         NOT NULL,
    idempotency_key  text         NOT NULL,
    -- sha256 of the route and the canonical request body: the same key with another body is a 409.
    request_sha256   bytea        NOT NULL,
    -- NULL only inside the claiming transaction; committed rows always carry the response.
    status_code      integer,
    response         jsonb,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    expires_at       timestamptz  NOT NULL,
    PRIMARY KEY (project_id, idempotency_key)
);
-- Purging the expired records of a project.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (project_id, expires_at);
