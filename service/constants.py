"""The constants of the specs, each defined here and nowhere else.

Names follow `spec/context-assembler.md` and `spec/API.md`. The scoring weights are documented
as *not* part of the public contract: they may change between versions without an API break.
"""

from typing import Final

EMBED_DIM: Final = 384

# Context Assembler (spec/context-assembler.md).
RETRIEVAL_TOP_K: Final = 64
CANDIDATE_LIMIT: Final = 256
EPISODE_TOP_K: Final = 8
MULTI_HOP_MAX_ENTITIES: Final = 2
MULTI_HOP_MAX_PER_ENTITY: Final = 5
DEFAULT_BUDGET_TOKENS: Final = 900
RECENCY_TAU_SECONDS: Final = 30 * 24 * 3600.0

# Hybrid score weights. Not part of the public contract (see module docstring).
WEIGHT_SIMILARITY: Final = 0.6
WEIGHT_TEXT_RANK: Final = 0.3
WEIGHT_RECENCY: Final = 0.1

# Phase 1 reads every vector of a scope smaller than this (or than the size its bucket calls
# for, queries/context.sql) instead of walking the bucket's HNSW graph (docs/performance.md).
EXACT_SCAN_MIN_FACTS: Final = 1000

# ts_rank_cd normalisation flag 32 maps rank to rank/(rank+1), bounded in [0, 1).
TS_RANK_NORMALIZATION: Final = 32

# Write side (spec/API.md).
MAX_BATCH: Final = 1000
MAX_CONTENT_CHARS: Final = 8000
MAX_QUERY_CHARS: Final = 4000
MAX_SCOPE_CHARS: Final = 200
MAX_PAGE_LIMIT: Final = 500
DEFAULT_PAGE_LIMIT: Final = 50
