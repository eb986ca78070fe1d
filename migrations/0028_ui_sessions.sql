-- Server-side sessions of the /ui pages. The browser's cookie holds the project and a random
-- secret; only the secret's SHA-256 is stored, so neither a copy of this table nor a stolen
-- cookie is an API key, and logging out (or revoking the key) ends the session at once.
CREATE TABLE ui_sessions (
    project_id    text        NOT NULL,
    session_hash  bytea       NOT NULL,
    key_id        uuid        NOT NULL,
    -- Sent back in every state-changing form of the session and compared on POST.
    csrf_token    text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (project_id, session_hash),
    FOREIGN KEY (project_id, key_id) REFERENCES api_keys (project_id, key_id) ON DELETE CASCADE
);
-- Expired sessions are deleted per project at each login.
CREATE INDEX ui_sessions_expiry ON ui_sessions (project_id, expires_at);
