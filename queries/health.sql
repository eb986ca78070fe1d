-- name: ping()$
-- Readiness probe: the database answers.
SELECT 1 AS ok;
