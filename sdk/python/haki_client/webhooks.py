"""Verify a webhook delivery from Haki (docs/webhooks.md).

Each delivery carries `Haki-Signature: t=<unix seconds>,v1=<hex>`, where `<hex>` is the
HMAC-SHA256 of `<t>.<raw body>` keyed by the webhook's secret (`whsec_...`, shown once when the
webhook was made). Verify the raw body, before parsing it:

    from haki_client.webhooks import verify_signature

    if not verify_signature(request_body, request.headers["Haki-Signature"], secret):
        return 400
    # `Haki-Event-Id` stays the same across retries: skip an event id already handled.

The same rule, with the same test vectors (sdk/webhook_vectors.json), is `verifyWebhookSignature`
of the TypeScript SDK.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Haki-Signature"
EVENT_ID_HEADER = "Haki-Event-Id"
# A delivery signed longer ago than this (or this far ahead) is refused: a replayed request.
DEFAULT_TOLERANCE_SECONDS = 300


def _parts(header: str) -> tuple[int | None, list[str]]:
    timestamp: int | None = None
    signatures: list[str] = []
    for item in header.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep:
            continue
        if name == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            signatures.append(value)
    return timestamp, signatures


def verify_signature(
    body: bytes | str,
    header: str,
    secret: str,
    *,
    tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """True when `header` (the `Haki-Signature` value) signs `body` (the raw request body) under
    `secret`, at a time within `tolerance_seconds` of `now` (default: the clock)."""
    raw = body.encode() if isinstance(body, str) else body
    timestamp, signatures = _parts(header)
    if timestamp is None or not signatures:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_seconds:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256).hexdigest()
    # Every candidate is compared, in constant time each.
    return any([hmac.compare_digest(expected.encode(), s.encode()) for s in signatures])
