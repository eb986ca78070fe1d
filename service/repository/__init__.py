"""The repository: the only layer that calls `queries/`. One module per area (keys, facts, events,
conflicts, idempotency, health, context, traces); each turns rows into frozen Structs and SQL
failures into domain errors, never HTTP errors. `base` holds what they share."""

from service.repository.base import Conn, long_transaction

__all__ = ["Conn", "long_transaction"]
