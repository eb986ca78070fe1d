-- A replay rebuilt a call with the deployment's current HAKI_TEXT_SEARCH_CONFIG and the current
-- code's profile weights, so a change of either since the call made "replaying with no override
-- reproduces the original decisions" silently false. The call now records both, GET
-- /v1/inspect shows them, and a replay uses them (docs/time-travel.md). NULL: a call logged
-- before this migration (a replay then uses the current ones, as before).
--
-- Adding nullable columns without a default rewrites nothing; the checks are NOT VALID, so no
-- scan of the existing calls either (they are all NULL), and every new row is checked.
ALTER TABLE public.context_calls
    ADD COLUMN text_search_config text,
    ADD COLUMN weights double precision[];

ALTER TABLE public.context_calls
    ADD CONSTRAINT context_calls_text_search_config_check
        CHECK (text_search_config = ANY (ARRAY['english'::text, 'simple'::text])) NOT VALID,
    ADD CONSTRAINT context_calls_weights_check
        CHECK (cardinality(weights) = 3) NOT VALID;
