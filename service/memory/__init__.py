"""Memory: writes, idempotency, import, export, erasure, retention and statistics."""
