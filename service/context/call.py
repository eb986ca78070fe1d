"""One context call's terms, as a value: what the assembler and the call runner read.

The HTTP handler builds a call from its request and the deployment's settings
(`ContextCall.of`), a replay from the stored call it rebuilds (service/context/replay.py), the
benchmarks from their own terms. Settings are read once, here: nothing downstream sees them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import msgspec

from service.constants import (
    UNIFIED_WEIGHT_RECENCY,
    UNIFIED_WEIGHT_SIMILARITY,
    UNIFIED_WEIGHT_TEXT_RANK,
    WEIGHT_RECENCY,
    WEIGHT_SIMILARITY,
    WEIGHT_TEXT_RANK,
)
from service.context.model import Weights
from service.errors import InvalidInput
from service.instants import storable_utc
from service.settings import ContextProfile, Settings, TextSearchConfig
from service.structs import ContextRequest

# The hybrid score's weights of each profile (not contract; service/constants.py).
PROFILE_WEIGHTS: dict[ContextProfile, Weights] = {
    "unified": (UNIFIED_WEIGHT_SIMILARITY, UNIFIED_WEIGHT_TEXT_RANK, UNIFIED_WEIGHT_RECENCY),
    "facts_first": (WEIGHT_SIMILARITY, WEIGHT_TEXT_RANK, WEIGHT_RECENCY),
}


class ContextCall(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one POST /v1/context call (or a replay of one) runs with, each a value.

    The scope and the query; the budget and whether episodes take part; the profile and the
    instant (None: now); the recall floor (0: no gate), the text search configuration and the
    hybrid score's weights, all three recorded in the trace so that a replay ranks as the call
    did; the embedder's time-out for the query; the origin's trace id when this is a replay."""

    project_id: str
    subject_id: str
    query: str
    budget_tokens: int
    include_episodes: bool
    profile: ContextProfile
    as_of: datetime | None
    recall_max_distance: float
    text_search_config: TextSearchConfig
    weights: Weights
    embed_timeout_seconds: float
    replay_of: UUID | None = None

    @classmethod
    def of(cls, req: ContextRequest, settings: Settings, *, weights: Weights | None = None) -> ContextCall:
        """The call of a request: the request's profile or the deployment's, with its weights
        unless `weights` is given (benchmarks/locomo.py's single-signal modes; the HTTP API
        never exposes them)."""
        check_as_of("as_of", req.as_of)
        profile: ContextProfile = req.profile or settings.context_profile
        return cls(
            project_id=req.project_id,
            subject_id=req.subject_id,
            query=req.query,
            budget_tokens=req.budget_tokens,
            include_episodes=req.include_episodes,
            profile=profile,
            as_of=req.as_of,
            recall_max_distance=settings.recall_max_distance,
            text_search_config=settings.text_search_config,
            weights=weights or PROFILE_WEIGHTS[profile],
            embed_timeout_seconds=settings.embed_timeout_seconds,
        )


def check_as_of(field: str, as_of: datetime | None) -> None:
    """An as-of instant must not be in the future (docs/time-travel.md): the memory of an instant
    that has not happened yet is not known. Years 1..9999 in UTC, as every stored timestamp."""
    if as_of is None:
        return
    if storable_utc(field, as_of) > datetime.now(UTC):
        raise InvalidInput(field, "is in the future: the memory can only be read as of now or before")


__all__ = ["PROFILE_WEIGHTS", "ContextCall", "check_as_of"]
