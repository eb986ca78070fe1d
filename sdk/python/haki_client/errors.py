"""Exceptions: a `HakiError` subclass for each of the contract's common codes.

Catch `HakiError` for everything, a subclass for one case, or compare `exc.code`: the other
codes (`url_refused`, `embedding_model_mismatch`, `payload_too_large`, `unsupported_media_type`,
`method_not_allowed`, `extractor_error`, `extractor_timeout`, `internal`) and an unknown code from
a newer server raise `HakiError` itself, with that code. `url_refused` is a 422 naming `field`
that `except ValidationError` does not catch.

A write's error may say its outcome is unknown (`details["outcome_unknown"]`: an attempt may have
applied it) and, for a deduplicated write, carries its Idempotency-Key
(`details["idempotency_key"]`): see `RetryPolicy`.
"""

from __future__ import annotations

from typing import Any


class HakiError(Exception):
    """An error answer of the service (or no answer at all, for `HakiConnectionError`)."""

    code: str = "error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status_code: int | None = None,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status_code = status_code
        self.details = details or {}
        self.retry_after = retry_after

    @property
    def field(self) -> str | None:
        """The offending field, for validation errors (`details.field`)."""
        value = self.details.get("field")
        return value if isinstance(value, str) else None

    def __str__(self) -> str:
        status = f" (HTTP {self.status_code})" if self.status_code is not None else ""
        return f"{self.code}{status}: {self.message}"


class Unauthorized(HakiError):
    code = "unauthorized"


class Forbidden(HakiError):
    code = "forbidden"


class NotFound(HakiError):
    code = "not_found"


class ValidationError(HakiError):
    code = "validation_error"


class InvalidArgument(ValidationError, ValueError):
    """An argument the client refuses before sending anything (a malformed id): `field` names it.
    No request was made, so `status_code` is None. Also a `ValueError`, as it was before."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, details={"field": field})


class BudgetExceeded(ValidationError):
    """`budget_tokens` is not a positive integer (a validation error of its own code)."""

    code = "budget_exceeded"


class ConflictError(HakiError):
    """409: e.g. resolving a set that is already resolved, or an Idempotency-Key reused with
    another body."""

    code = "conflict"


class RateLimited(HakiError):
    """429 after the retries ran out; `retry_after` says how long the server asked to wait."""

    code = "rate_limited"


class Unavailable(HakiError):
    """503: database or embedder down (after the retries the server's `Retry-After` allowed ran
    out), or a failure the server marks permanent, such as extraction not configured
    (`details["permanent"]`, never retried)."""

    code = "unavailable"


class HakiConnectionError(HakiError):
    """No HTTP answer (connection refused, reset, timed out) after the retries ran out, or at
    once for a call that is not replayable whose request may have reached the server: its
    message then says the outcome is unknown, and `details["outcome_unknown"]` is true
    (RetryPolicy)."""

    code = "connection_error"


ERRORS_BY_CODE: dict[str, type[HakiError]] = {
    cls.code: cls
    for cls in (
        Unauthorized,
        Forbidden,
        NotFound,
        ValidationError,
        BudgetExceeded,
        ConflictError,
        RateLimited,
        Unavailable,
    )
}

# For error bodies that are not the contract's (a proxy's HTML page, an empty 502): the code of
# the status, else `error` (not `internal`, the contract's "a bug; the server logged it").
_CODE_BY_STATUS = {
    400: "validation_error",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    422: "validation_error",
    429: "rate_limited",
    503: "unavailable",
}


def error_for(
    status_code: int,
    code: str | None,
    message: str,
    details: dict[str, Any] | None,
    retry_after: float | None,
) -> HakiError:
    code = code or _CODE_BY_STATUS.get(status_code, "error")
    cls = ERRORS_BY_CODE.get(code, HakiError)
    return cls(message, code=code, status_code=status_code, details=details, retry_after=retry_after)
