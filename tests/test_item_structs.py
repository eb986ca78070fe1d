"""The Structs a context call makes one of per item are not tracked by the garbage collector
(msgspec's gc=False, service/context/model.py): a `unified` call makes ~750 of them, which set off
about one young-generation collection a call while tracked. Untracked is safe only while none can
hold a container (a cycle through it would never be collected), so every field's type is checked
to hold scalars only."""

from __future__ import annotations

import gc
import types
import uuid
from datetime import UTC, datetime
from typing import Any, Literal, Union, get_args, get_origin

import msgspec
import pytest

from service.context.model import Blocked, Candidate, Outcome, decision
from service.structs import Decision, PacketEpisode, PacketFact

ITEM_STRUCTS: list[type[msgspec.Struct]] = [Candidate, Blocked, Outcome, Decision, PacketFact, PacketEpisode]
SCALARS = (str, int, float, bool, uuid.UUID, datetime, type(None))


def leaf_types(annotation: Any) -> list[Any]:
    """The types an annotation admits, through Annotated, unions and Literal."""
    origin = get_origin(annotation)
    if origin is Literal:
        return [type(value) for value in get_args(annotation)]
    if origin in (Union, types.UnionType) or (origin is not None and str(origin) == "typing.Annotated"):
        return [t for arg in get_args(annotation) for t in leaf_types(arg)]
    if hasattr(annotation, "__metadata__"):  # Annotated[...] on Python 3.11
        return leaf_types(annotation.__origin__)
    return [annotation]


@pytest.mark.parametrize("struct", ITEM_STRUCTS, ids=lambda s: s.__name__)
def test_item_structs_hold_no_container(struct: type[msgspec.Struct]) -> None:
    for field in msgspec.structs.fields(struct):
        for leaf in leaf_types(field.type):
            assert leaf in SCALARS or (isinstance(leaf, type) and issubclass(leaf, tuple(ITEM_STRUCTS))), (
                struct.__name__,
                field.name,
                leaf,
            )


def test_item_structs_are_not_tracked() -> None:
    candidate = Candidate(
        item_type="fact",
        item_id=uuid.uuid4(),
        content="Alice likes tea",
        tokens=4,
        score=0.5,
        similarity=0.5,
        text_rank=0.0,
        recency=1.0,
        cosine_distance=0.5,
        recorded_from=datetime.now(UTC),
    )
    blocked = Blocked(fact_id=uuid.uuid4(), reason_code="conflict_open", tokens=3, total=1)
    items = [
        candidate,
        blocked,
        Outcome(candidate, "included", "packed", 1),
        decision(candidate, "included", "packed", 1),
        decision(blocked, "blocked", "conflict_open", None),
        PacketFact(
            fact_id=candidate.item_id,
            content=candidate.content,
            score=0.5,
            tokens=4,
            reason_code="packed",
            valid_from=None,
            valid_to=None,
            recorded_from=datetime.now(UTC),
            source_event_id=None,
        ),
        PacketEpisode(
            event_id=uuid.uuid4(), content="Hi", occurred_at=datetime.now(UTC), score=0.1, tokens=1
        ),
    ]
    assert {type(i) for i in items} == set(ITEM_STRUCTS)
    assert [gc.is_tracked(i) for i in items] == [False] * len(items)
