-- haki_blocked_facts takes the scope's open-conflict facts from its caller (migrations/rules.sql):
-- both candidate statements read them once already (their open_members), and the function read
-- them a second time. The version without the argument goes; rules.sql defines the new one.
DROP FUNCTION public.haki_blocked_facts(text, text, timestamptz);
