-- Context Assembler read path (docs/performance.md). The blocked-facts part of fact_candidates
-- used to test every active fact of the scope for an open conflict or a stale volatility
-- (10,000 index probes at 10,000 facts: most of a call's time). It now starts from the open
-- ConflictSets of the scope (conflict_sets_one_open_per_key) and from the active volatile facts
-- of the scope, which this partial index lists without reading the stable ones.
CREATE INDEX facts_scope_volatile_active ON facts (project_id, subject_id)
    WHERE status = 'active' AND volatility = 'volatile';
