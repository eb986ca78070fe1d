"""API keys: `hk_` + 32 random bytes; only the sha256 is stored, compared in constant time."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Final
from uuid import UUID

import msgspec

from service.errors import Forbidden, Unauthorized
from service.ids import uuid7
from service.repository import Conn
from service.repository import keys as keys_repo

KEY_PREFIX = "hk_"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """The caller: the project its key belongs to."""

    project_id: str
    key_id: UUID

    def require(self, project_id: str) -> None:
        """A key reaches only its own project's data."""
        if not hmac.compare_digest(self.project_id.encode(), project_id.encode()):
            raise Forbidden(
                "This API key belongs to another project.",
                field="project_id",
                project_id=project_id,
            )


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def new_key() -> str:
    return KEY_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def given_bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, None without one. The scheme is
    case-insensitive (RFC 7235): `bearer` too, on /v1, /mcp and /metrics alike."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("Missing Authorization: Bearer <key> header.")
    token = given_bearer(authorization)
    if token is None:
        raise Unauthorized("The Authorization header must be `Bearer <key>`.")
    return token


# The usual cause beside a typo: a key made by `haki keys create` against another database.
UNKNOWN_KEY: Final = (
    "Unknown or revoked API key (a key is known to the database it was created in: `haki keys "
    "create` under the server's HAKI_DATABASE_URL or HAKI_DATA_DIR)."
)


async def authenticate(conn: Conn, authorization: str | None) -> Principal:
    token = bearer_token(authorization)
    digest = hash_key(token)
    found = await keys_repo.find_api_key(conn, digest)
    if found is None or not hmac.compare_digest(found[2], digest):
        raise Unauthorized(UNKNOWN_KEY)
    return Principal(project_id=found[0], key_id=found[1])


async def create_key(conn: Conn, project_id: str, label: str | None = None) -> tuple[UUID, str]:
    key = new_key()
    key_id = uuid7()
    await keys_repo.insert_api_key(conn, project_id, key_id, hash_key(key), label)
    return key_id, key


async def revoke_key(conn: Conn, key_or_id: str) -> bool:
    """Revokes by the key itself or by its key id (as printed by `haki keys list`)."""
    if key_or_id.startswith(KEY_PREFIX):
        found = await keys_repo.find_api_key(conn, hash_key(key_or_id))
        if found is None:
            return False
        return await keys_repo.revoke_api_key(conn, found[0], found[1])
    raise ValueError("pass the key itself (hk_...) or use --project with a key id")


async def revoke_key_id(conn: Conn, project_id: str, key_id: UUID) -> bool:
    return await keys_repo.revoke_api_key(conn, project_id, key_id)
