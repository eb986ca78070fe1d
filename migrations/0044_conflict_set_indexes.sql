-- Conflict sets by age, and by scope then age. GET /v1/conflicts pages a project's sets newest
-- first (each page sorted every set of the project), and a subject's erasure, a subject's listing
-- and a context call as of an instant read one scope's sets (each read every set of the project).
-- Resolved sets are kept, so both reads grew with the project's history, not with the answer.
CREATE INDEX conflict_sets_newest ON conflict_sets (project_id, created_at DESC, conflict_set_id);
CREATE INDEX conflict_sets_scope ON conflict_sets (project_id, subject_id, created_at DESC, conflict_set_id);
