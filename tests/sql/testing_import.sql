-- Test-only statements of tests/test_import.py. Never called by the service.

-- name: test_import_counts(project_id, subject_id)^
-- What an import left in one scope: facts, distinct fact contents, and events.
SELECT (SELECT count(*) FROM facts AS f
        WHERE f.project_id = :project_id AND f.subject_id = :subject_id) AS facts,
       (SELECT count(DISTINCT f.content) FROM facts AS f
        WHERE f.project_id = :project_id AND f.subject_id = :subject_id) AS distinct_contents,
       (SELECT count(*) FROM events AS e
        WHERE e.project_id = :project_id AND e.subject_id = :subject_id) AS events;
