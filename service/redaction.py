"""URLs as the server prints them: in logs, CLI lines and error messages, never a secret; and a
model server's endpoints, built from its base URL.

A database URL keeps its user and host and masks its passwords, so `doctor` still says where it
looked; a model's HTTP URL (embedder, extraction) keeps scheme, host and path only, as any
userinfo or query part may hold a key. Neither raises: a URL that cannot be parsed prints as
UNPARSABLE_URL, since where its secret lies is unknown.
"""

from __future__ import annotations

import urllib.parse
from typing import Final

# The query parameters of a database URL that hold a secret (libpq's, which asyncpg reads too).
SECRET_PARAMETERS: Final = frozenset({"password", "sslpassword"})
UNPARSABLE_URL: Final = "<unparsable URL>"


def _split(url: str) -> urllib.parse.SplitResult | None:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL": an unbalanced bracket
        return None
    if not parts.scheme or not url.lstrip().lower().startswith(f"{parts.scheme}://"):
        # Not a URL (a libpq keyword string, say): its secret is anywhere in it.
        return None
    return parts


def redacted_database_url(url: str) -> str:
    """A database URL without its passwords (the userinfo's, ?password=, ?sslpassword=)."""
    parts = _split(url)
    if parts is None:
        return UNPARSABLE_URL
    userinfo, at, host = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    netloc = f"{user}:***@{host}" if colon else f"{userinfo}{at}{host}"
    params = [p.partition("=") for p in parts.query.split("&")] if parts.query else []
    query = "&".join(
        f"{name}=***"
        if urllib.parse.unquote_plus(name).lower() in SECRET_PARAMETERS
        else f"{name}{eq}{value}"
        for name, eq, value in params
    )
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{parts.scheme}://{netloc}{parts.path}{'?' if query else ''}{query}{fragment}"


def redacted_http_url(url: str) -> str:
    """A model server's URL with scheme, host, port and path only: no userinfo, query or
    fragment."""
    parts = _split(url)
    if parts is None:
        return UNPARSABLE_URL
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def endpoint_url(base_url: str, path: str) -> str:
    """`path` (`/embeddings`) after the base URL's own path, its query kept after it: a gateway's
    `?api-version=...` or `?key=...` went into the path's place (`/v1?key=K/embeddings`)."""
    parts = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))
