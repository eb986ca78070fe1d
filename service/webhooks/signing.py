"""The signature of a delivery: HMAC-SHA256 of `<timestamp>.<body>` under the webhook's secret,
sent as `Haki-Signature: t=<unix seconds>,v1=<hex digest>` (the scheme of Stripe's webhooks).

The SDKs verify it with the same rule (sdk/python/haki_client/webhooks.py,
sdk/typescript/src/webhooks.ts) and the shared vectors of sdk/webhook_vectors.json.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "Haki-Signature"
EVENT_ID_HEADER = "Haki-Event-Id"
EVENT_TYPE_HEADER = "Haki-Event-Type"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>`, keyed by the secret's UTF-8 bytes."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"
