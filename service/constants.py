"""The constants of the specs, each defined here and nowhere else.

Names follow `docs/spec/context-assembler.md` and `docs/spec/api.md`. The scoring weights are documented
as *not* part of the public contract: they may change between versions without an API break.
"""

from typing import Final

EMBED_DIM: Final = 384
# How long a context call waits for its query's vector on the connection it was lent, its
# transaction open beside the embedding (docs/performance.md, "Outside the stages"). Past it the
# call gives the connection back until the vector comes (docs/reliability.md, "Connections given
# back while a request waits"): a query embeds in 5-7 ms alone and its p95 was 85-160 ms at 8
# concurrent calls on 2 cores (benchmarks/http_latency.py), and a remote embedder that hangs
# would otherwise hold a connection per call for HAKI_EMBED_TIMEOUT_SECONDS (10 s).
CONTEXT_EMBED_PATIENCE_SECONDS: Final = 0.25

# Runs of one context call on the primary: a write to the scope that commits while the call
# reads makes it run again (service/db/call_runner.py); past this many, a 503 to retry.
CONTEXT_CALL_RUNS: Final = 3

# Context Assembler (docs/spec/context-assembler.md).
RETRIEVAL_TOP_K: Final = 64
CANDIDATE_LIMIT: Final = 256
EPISODE_TOP_K: Final = 8
MULTI_HOP_MAX_ENTITIES: Final = 2
MULTI_HOP_MAX_PER_ENTITY: Final = 5
DEFAULT_BUDGET_TOKENS: Final = 900
# Both profiles (docs/spec/context-profiles.md, "Multi-hop reads are bounded"): the match step reads
# at most this many facts naming each entity, whatever the scope's size, and keeps the
# MULTI_HOP_MAX_PER_ENTITY best of them.
MULTI_HOP_MAX_MATCHES_PER_ENTITY: Final = 64
# `unified`: the most frequent entities of the kept facts that are offered to the statement,
# which keeps the first MULTI_HOP_MAX_ENTITIES informative ones (named by at most half of the
# scope's texts).
MULTI_HOP_ENTITY_CANDIDATES: Final = 4 * MULTI_HOP_MAX_ENTITIES
# How many of the scope's newest facts, and as many events, tell whether an entity is named by
# more than half of its texts: a sample of 128 puts a 50 % share within +-4.4 % (one standard
# error; 256 gave +-3 %), and the names the rule exists for (speakers, "Yeah") sit at 58-75 %.
# It also tells whether a name reads the newest facts in both profiles (migration 0039). 128 + 128
# cost 0.32 ms more than 64 + 64 on the CI guard's world; LoCoMo dev is identical with either.
ENTITY_SAMPLE_DOCS: Final = 64

# The `facts_first` text side ranks with ts_rank_cd(search_vector, websearch_to_tsquery(query))
# (docs/spec/context-assembler.md, "2. Hybrid score"), whose cost grows faster than the query's
# words: over 64 texts, 256 words took 46 ms and 660 words 2.4 s, so a legal 4,000-character
# query held a connection past the statement timeout. It reads the query's first
# FACTS_FIRST_QUERY_MAX_WORDS words: its words are ANDed, and no stored text holds 64 of them.
FACTS_FIRST_QUERY_MAX_WORDS: Final = 64

# The `unified` profile's text side (docs/spec/context-profiles.md, rule 1). Its costs grow with the
# words of a query and never with the scope. A query's words beyond the first
# TEXT_QUERY_MAX_WORDS are not ranked (a 4,000-character query would otherwise probe the index
# hundreds of times). Candidates are matched on its TEXT_MATCH_MAX_WORDS rarest words (a text
# that holds none of them holds only common words and ranks low), each reading at most
# TEXT_MATCHES_PER_WORD postings of facts and as many of events: with a cap per word alone, a
# 32-word query read 32 x 64 rows of each kind (46 ms). Document frequencies come from the
# scope's newest IDF_SAMPLE_DOCS facts and as many events (exact up to that size), so no call
# counts a common word's postings: for a 7-word query over a 10k-fact scope, 1,000 of each cost
# 2.2 ms, 256 of each 0.6 ms (0.9 ms on the benchmark world). 128 of each cost 0.45 ms there,
# but lost 0.018 of multi-hop recall on LoCoMo's dev half (docs/quality.md).
TEXT_QUERY_MAX_WORDS: Final = 32
TEXT_MATCH_MAX_WORDS: Final = 8
TEXT_MATCHES_PER_WORD: Final = RETRIEVAL_TOP_K
IDF_SAMPLE_DOCS: Final = 256
# GIN has no ordered scan: a word's bitmap is built whole before its first row is read, so a
# word named by 2.2 % of a 1M-fact scope cost 13.8 ms for its 64 matches, three such words most
# of the unified candidates' 40 ms. Such a word reads the scope's newest facts instead (3.0 ms
# for the 2,903 rows that held 64 matches), when share^2 x scope facts >= TEXT_PROBE_MIN_COST
# (the crossover is at 98 for 64 matches: 1.03 us a row against 0.67 us a posting), where its
# GIN bitmap would hold TEXT_PROBE_MIN_POSTINGS or more (2.7 ms: below that, reading the scope's
# size from the planner's statistics, 0.3-0.5 ms, cost more than it saved on a 10k scope), and
# its matches are expected within half of TEXT_PROBE_MAX_ROWS, the most one probe reads (8 ms).
# Multi-hop entities follow the same rule (migration 0013, haki_text_probe; docs/performance.md).
TEXT_PROBE_MAX_ROWS: Final = 8192
TEXT_PROBE_MIN_COST: Final = 128.0
TEXT_PROBE_MIN_POSTINGS: Final = 4096.0
RECENCY_TAU_SECONDS: Final = 30 * 24 * 3600.0

# Hybrid score weights of the `facts_first` profile. Not part of the public contract (see module
# docstring).
WEIGHT_SIMILARITY: Final = 0.6
WEIGHT_TEXT_RANK: Final = 0.3
WEIGHT_RECENCY: Final = 0.1

# Hybrid score weights of the `unified` profile (docs/spec/context-profiles.md: weights may be tuned
# per profile, on the dev half only). No prior preference between the meaning of a text and its
# words, recency as in facts_first. Chosen on LoCoMo's dev half among 2-4 ratios, which is
# tuning: +0.012 evidence recall over (0.6, 0.3, 0.1), on each of its five conversations
# (docs/quality.md). Not contract either.
UNIFIED_WEIGHT_SIMILARITY: Final = 0.45
UNIFIED_WEIGHT_TEXT_RANK: Final = 0.45
UNIFIED_WEIGHT_RECENCY: Final = 0.1

# Phase 1 reads every vector of a scope smaller than this (or than the size its bucket calls
# for, queries/context.sql) instead of walking the bucket's HNSW graph (docs/performance.md).
EXACT_SCAN_MIN_FACTS: Final = 1000

# 100 years, the longest span a request or a setting may name: a fact's stale_after_seconds and
# its default HAKI_VOLATILE_STALE_AFTER_SECONDS, HAKI_IDEMPOTENCY_TTL_SECONDS,
# HAKI_TRACE_RETENTION_DAYS. The timestamps they move stay within PostgreSQL's: a TTL past ~9.2e12 s
# overflowed make_interval, and every keyed write was a 500.
MAX_SPAN_DAYS: Final = 36_500
MAX_SPAN_SECONDS: Final = MAX_SPAN_DAYS * 24 * 3600

# Write side (docs/spec/api.md).
MAX_BATCH: Final = 1000
MAX_CONTENT_CHARS: Final = 8000
MAX_QUERY_CHARS: Final = 4000
MAX_SCOPE_CHARS: Final = 200
MAX_PAGE_LIMIT: Final = 500
DEFAULT_PAGE_LIMIT: Final = 50
# GET /v1/conflicts: a page holds whole sets up to this many members (a larger set comes alone),
# then `next_cursor`; the bound the listing had as a silent LIMIT on its member rows.
CONFLICT_PAGE_MEMBERS: Final = 10_000
# The MCP tools that list many memories (inspect, list_conflicts) answer a model, whose context
# they must not flood: a memory's text is cut to this many characters (with an ellipsis), and a
# conflicts page holds this many members (a larger set still comes whole, alone).
MCP_CONTENT_CHARS: Final = 300
MCP_CONFLICT_PAGE_MEMBERS: Final = 100
# `haki mcp`, the stdio bridge: a tool call may wait this long for the server's answer (an
# extraction model's); its checks at start (a ping, the pin) and the MCP handshake answer within
# MCP_BRIDGE_START_SECONDS, or the bridge exits with why, before an MCP client gives up on it.
MCP_BRIDGE_READ_SECONDS: Final = 300.0
MCP_BRIDGE_START_SECONDS: Final = 10.0
# Events' vectors in context (docs/spec/context-profiles.md, rule 8), made by a background
# worker: the events it embeds at once, and its wait once nothing is pending.
EVENT_CONTEXT_BATCH: Final = 64
EVENT_CONTEXT_IDLE_SECONDS: Final = 1.0
# How long a process's claim on a batch keeps the other processes off it (migration 0047): past
# the write lane's time-out (HAKI_EMBED_WRITE_TIMEOUT_SECONDS, 120 s by default), so that a slow
# batch is not embedded twice; a process that dies mid-batch delays its events by as much.
EVENT_CONTEXT_CLAIM_SECONDS: Final = 300.0
# The longest HAKI_EMBED_WRITE_TIMEOUT_SECONDS: a minute within that claim.
EMBED_WRITE_TIMEOUT_MAX_SECONDS: Final = EVENT_CONTEXT_CLAIM_SECONDS - 60.0
# The end of the event before, in characters: half the local model's window (LOCAL_MAX_LENGTH, 256
# tokens) at about 4 characters a token, so a long predecessor never truncates the event away.
EVENT_CONTEXT_BEFORE_CHARS: Final = 512
# `haki import`: batches stored at once, each in its own transaction (`--concurrency`). Two: a
# second core takes the second batch's index inserts (docs/performance.md).
IMPORT_CONCURRENCY: Final = 2
IMPORT_MAX_CONCURRENCY: Final = 8

# What every 401 asks for (RFC 7235 `WWW-Authenticate`): /v1, /mcp and /metrics take a bearer.
BEARER_CHALLENGE: Final = 'Bearer realm="haki"'

# Request bodies. The deepest body the contract needs is 4 levels plus a fact's
# `metadata`; 64 leaves metadata 60 levels. Deeper JSON is refused before it is decoded: msgspec
# ran out of Python recursion near 1,000 levels (a 2 KB body) and the request was a 500.
MAX_JSON_DEPTH: Final = 64

# POST /v1/extract. A conversation of up to EXTRACT_MAX_MESSAGES messages is one
# chat call; the model sees at most EXTRACT_KNOWN_FACTS active facts of the scope (keyed ones
# first, then the newest), which bounds the prompt whatever the scope's size.
EXTRACT_MAX_MESSAGES: Final = 100
EXTRACT_KNOWN_FACTS: Final = 100
EXTRACT_PROMPT_VERSION: Final = "v2"
