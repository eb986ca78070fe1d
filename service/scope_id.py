"""The one rule of a scope id (docs/spec/api.md, limits): a project id, a subject id or a fact's
key is 1..MAX_SCOPE_CHARS characters without NUL.

`ScopeId` carries it for msgspec decoding (and the OpenAPI schema); `SCOPE_ID_BOUNDS` and
`SCOPE_ID_JSON_SCHEMA` are the same bounds for Litestar's query parameters; `scope_id_problem`
checks a plain string that no Struct decodes (the CLI, a query parameter checked by hand, the
MCP project pin, a model's proposed key). tests/test_scope_id.py keeps it the only definition.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta

from service.constants import MAX_SCOPE_CHARS

# PostgreSQL text cannot hold NUL; refusing it at the edge names the field instead of failing in SQL.
NO_NUL: Final = r"^[^\x00]*$"

SCOPE_ID: Final = Meta(
    min_length=1,
    max_length=MAX_SCOPE_CHARS,
    pattern=NO_NUL,
    description=f"A scope id: 1..{MAX_SCOPE_CHARS} characters without NUL.",
)
# A field gives its own description with `Annotated[ScopeId, Meta(description=...)]`: msgspec
# keeps the bounds and the later description.
ScopeId = Annotated[str, SCOPE_ID]

# The bounds as `Parameter(**SCOPE_ID_BOUNDS)` keywords, and as the JSON Schema of a query
# parameter that its handler checks itself (`schema_extra=`).
SCOPE_ID_BOUNDS: Final[dict[str, Any]] = {
    "min_length": SCOPE_ID.min_length,
    "max_length": SCOPE_ID.max_length,
    "pattern": SCOPE_ID.pattern,
}
SCOPE_ID_JSON_SCHEMA: Final[dict[str, Any]] = {
    "minLength": SCOPE_ID.min_length,
    "maxLength": SCOPE_ID.max_length,
    "pattern": SCOPE_ID.pattern,
}

SCOPE_ID_PROBLEM: Final = f"must be 1..{MAX_SCOPE_CHARS} characters without NUL"

# The most UTF-8 bytes a scope id takes (four a character): what bounds a key built of one.
SCOPE_ID_MAX_BYTES: Final = 4 * MAX_SCOPE_CHARS


def scope_id_problem(value: str) -> str | None:
    """None if `value` is a scope id, else what is wrong with it (callers prefix the name)."""
    # Decoded against the type itself, so that the check cannot drift from the Structs'.
    try:
        msgspec.convert(value, ScopeId)
    except msgspec.ValidationError:
        return SCOPE_ID_PROBLEM
    return None
