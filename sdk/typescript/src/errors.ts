/**
 * Errors: a `HakiError` subclass for each of the contract's common codes, as in the Python SDK
 * (sdk/python/haki_client/errors.py).
 *
 * Catch `HakiError` for everything, a subclass for one case, or compare `err.code`: the other
 * codes (`url_refused`, `embedding_model_mismatch`, `payload_too_large`, `unsupported_media_type`,
 * `method_not_allowed`, `extractor_error`, `extractor_timeout`, `internal`) and an unknown code
 * from a newer server throw a `HakiError` itself, with that code. `url_refused` is a 422 naming
 * `field` that `instanceof ValidationError` does not match.
 *
 * A write's error may say its outcome is unknown (`details.outcome_unknown`: an attempt may have
 * applied it) and, for a deduplicated write, carries its Idempotency-Key
 * (`details.idempotency_key`): see `RetryPolicy`.
 */

/** An error answer of the service (or no answer at all, for `HakiConnectionError`). */
export class HakiError extends Error {
  /** The contract's error code: `validation_error`, `not_found`, `rate_limited`, ... */
  readonly code: string;
  /** The HTTP status of the answer; `null` when there was no answer. */
  readonly status: number | null;
  /** `details` of the error body (`{}` when it had none), e.g. `{ field: "facts[0].content" }`. */
  readonly details: Record<string, unknown>;
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  readonly retryAfter: number | null;

  constructor(
    message: string,
    options: {
      code?: string;
      status?: number | null;
      details?: Record<string, unknown> | null;
      retryAfter?: number | null;
      cause?: unknown;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? (new.target as unknown as { defaultCode?: string }).defaultCode ?? "error";
    this.status = options.status ?? null;
    this.details = options.details ?? {};
    this.retryAfter = options.retryAfter ?? null;
  }

  /** The offending field, for validation errors (`details.field`). */
  get field(): string | null {
    const value = this.details["field"];
    return typeof value === "string" ? value : null;
  }

  override toString(): string {
    const status = this.status !== null ? ` (HTTP ${this.status})` : "";
    return `${this.code}${status}: ${this.message}`;
  }
}

export class Unauthorized extends HakiError {
  static defaultCode = "unauthorized";
}

export class Forbidden extends HakiError {
  static defaultCode = "forbidden";
}

export class NotFound extends HakiError {
  static defaultCode = "not_found";
}

export class ValidationError extends HakiError {
  static defaultCode = "validation_error";
}

/**
 * An argument the client refuses before sending anything (a malformed id): `field` names it,
 * `status` is null (no request was made).
 */
export class InvalidArgument extends ValidationError {
  constructor(message: string, field: string) {
    super(message, { code: "validation_error", details: { field } });
  }
}

/** `budget_tokens` is not a positive integer (a validation error of its own code). */
export class BudgetExceeded extends ValidationError {
  static override defaultCode = "budget_exceeded";
}

/** 409: resolving a set that is already resolved, or an Idempotency-Key reused with another body. */
export class ConflictError extends HakiError {
  static defaultCode = "conflict";
}

/** 429 after the retries ran out; `retryAfter` says how long the server asked to wait. */
export class RateLimited extends HakiError {
  static defaultCode = "rate_limited";
}

/**
 * 503: database or embedder down (after the retries the server's `Retry-After` allowed ran out),
 * or a failure the server marks permanent, such as extraction not configured
 * (`details.permanent`, never retried).
 */
export class Unavailable extends HakiError {
  static defaultCode = "unavailable";
}

/**
 * No HTTP answer (connection refused, reset, timed out) after the retries ran out; or, at once,
 * the lost answer of a call that is not replayable: `details.outcome_unknown` is then true, and
 * the server may have applied the call.
 */
export class HakiConnectionError extends HakiError {
  static defaultCode = "connection_error";
}

type ErrorClass = new (
  message: string,
  options?: ConstructorParameters<typeof HakiError>[1],
) => HakiError;

const ERRORS_BY_CODE: Record<string, ErrorClass> = {
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_found: NotFound,
  validation_error: ValidationError,
  budget_exceeded: BudgetExceeded,
  conflict: ConflictError,
  rate_limited: RateLimited,
  unavailable: Unavailable,
};

// For error bodies that are not the contract's (a proxy's HTML page, an empty 502): the code of
// the status, else `error` (not `internal`, the contract's "a bug; the server logged it").
const CODE_BY_STATUS: Record<number, string> = {
  400: "validation_error",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  422: "validation_error",
  429: "rate_limited",
  503: "unavailable",
};

/** The error for an answer: the body's code when it has one, else one derived from the status. */
export function errorFor(
  status: number,
  code: string | null,
  message: string,
  details: Record<string, unknown> | null,
  retryAfter: number | null,
): HakiError {
  const resolved = code || CODE_BY_STATUS[status] || "error";
  const cls = Object.prototype.hasOwnProperty.call(ERRORS_BY_CODE, resolved)
    ? ERRORS_BY_CODE[resolved]!
    : HakiError;
  return new cls(message, { code: resolved, status, details, retryAfter });
}
