"""Python client for Haki, the memory service for AI agents.

from haki_client import Haki, render

with Haki("http://127.0.0.1:8000", "hk_...", project_id="demo") as haki:
    haki.write_facts("alice", ["Alice works at Acme as a data engineer."])
    print(render(haki.context("alice", "Where does Alice work?")))
"""

from haki_client._async import AsyncHaki
from haki_client._core import RetryPolicy, __version__
from haki_client._sync import Haki
from haki_client.errors import (
    BudgetExceeded,
    ConflictError,
    Forbidden,
    HakiConnectionError,
    HakiError,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from haki_client.models import (
    ConflictList,
    ConflictMember,
    ConflictSet,
    ContextPacket,
    EventIn,
    EventWriteResult,
    ExtractedFact,
    ExtractMessage,
    ExtractResult,
    Fact,
    FactIn,
    FactPage,
    FactStats,
    FactUsage,
    FactWriteResult,
    Health,
    Inspection,
    PacketEpisode,
    PacketFact,
    RefusedFact,
    ReplayChange,
    ReplayDiff,
    ReplayResult,
    StatsOverview,
    TraceDecision,
    WriteEventsResponse,
    WriteFactsResponse,
)
from haki_client.render import render

__all__ = [
    "AsyncHaki",
    "BudgetExceeded",
    "ConflictError",
    "ConflictList",
    "ConflictMember",
    "ConflictSet",
    "ContextPacket",
    "EventIn",
    "EventWriteResult",
    "ExtractMessage",
    "ExtractResult",
    "ExtractedFact",
    "Fact",
    "FactIn",
    "FactPage",
    "FactStats",
    "FactUsage",
    "FactWriteResult",
    "Forbidden",
    "Haki",
    "HakiConnectionError",
    "HakiError",
    "Health",
    "Inspection",
    "NotFound",
    "PacketEpisode",
    "PacketFact",
    "RateLimited",
    "RefusedFact",
    "ReplayChange",
    "ReplayDiff",
    "ReplayResult",
    "RetryPolicy",
    "StatsOverview",
    "TraceDecision",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
    "WriteEventsResponse",
    "WriteFactsResponse",
    "__version__",
    "render",
]
