/**
 * `Haki`: a fetch-based client of one Haki server, with the Python SDK's behaviour
 * (sdk/python/haki_client/_core.py, _async.py): bounded retries of 429, of a 503 the server asks
 * to retry (`Retry-After`, not `details.permanent`), of requests that never reached the server,
 * and, for replayable calls only, of lost answers; one `Idempotency-Key` per deduplicated write
 * reused across its retries; and a typed `HakiError` for every error answer and every argument
 * refused before sending.
 */
import { HakiConnectionError, HakiError, InvalidArgument, errorFor } from "./errors.js";
import type {
  ConflictList,
  ConflictSet,
  ContextPacket,
  ContextProfile,
  Event,
  EventErasure,
  EventIn,
  EventPage,
  ExportLine,
  ExtractMessage,
  ExtractResult,
  Fact,
  FactErasure,
  FactIn,
  FactPage,
  FactStats,
  Health,
  Inspection,
  ReplayResponse,
  StatsOverview,
  SubjectErasure,
  SubjectPage,
  WebhookCreated,
  WebhookDeleted,
  WebhookDeliveryList,
  WebhookDeliveryStatus,
  WebhookEventType,
  WebhookList,
  WriteEventsResponse,
  WriteFactsResponse,
} from "./types.js";

export const VERSION = "0.1.0";
export const DEFAULT_BASE_URL = "http://127.0.0.1:8000";
// POST /v1/extract waits for the server's chat model (HAKI_EXTRACT_TIMEOUT_SECONDS, 60 s by
// default) and then the embedder: the client's own 10 s would give up first (as in Python).
export const EXTRACT_TIMEOUT_MS = 120_000;
// What the server may take for a legal batch write, by its documented defaults (docs/spec/api.md,
// "Configuration"): a connection (HAKI_POOL_ACQUIRE_TIMEOUT_SECONDS, 5 s), the embedding, queue
// included (HAKI_EMBED_WRITE_TIMEOUT_SECONDS, 120 s), a connection again, then the store's
// statements (HAKI_STATEMENT_TIMEOUT_MS, 5 s, plus HAKI_WRITE_TIMEOUT_PER_ITEM_MS, 20 ms, for each
// of up to 1,000 items). An attempt given up sooner is resent while the first may still commit,
// and the resend is embedded and charged again (as in Python).
export const BATCH_WRITE_TIMEOUT_MS = 5_000 + 120_000 + 5_000 + 5_000 + 1000 * 20;
// The longest wait a timer can take: Node runs a longer one after 1 ms.
const MAX_TIMER_MS = 2 ** 31 - 1;
// An erasure may run up to the server's HAKI_ERASURE_TIMEOUT_MS (120 s by default), plus margin.
export const ERASURE_TIMEOUT_MS = 125_000;
// A context call (and a replay, which runs one) waits for its query's vector up to the server's
// HAKI_EMBED_TIMEOUT_SECONDS (10 s by default), then answers a `degraded` packet from full text:
// after that wait it may wait for a connection again (HAKI_POOL_ACQUIRE_TIMEOUT_SECONDS, 5 s) and
// run its statements (HAKI_STATEMENT_TIMEOUT_MS, 5 s), 20 s in all. The client waits 30 s (or
// timeoutMs when longer), so it does not give up and ask again just before that answer (as in Python).
export const CONTEXT_TIMEOUT_MS = 30_000;

type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface HakiOptions {
  /** Default: $HAKI_BASE_URL, else http://127.0.0.1:8000. */
  baseUrl?: string;
  /** Default: $HAKI_API_KEY. */
  apiKey?: string;
  /**
   * Optional: without it, calls name no project and the server uses the key's (a key reaches one
   * project only). Given, it is the default of every call; each method also takes it.
   */
  projectId?: string;
  /**
   * Per attempt, in milliseconds (default 10 000): a number in (0, 2^31-1], a fraction rounded up
   * to the next millisecond; else the constructor throws a `TypeError`. Calls the server may take
   * longer for wait longer (see each).
   */
  timeoutMs?: number;
  /** Retries after the first attempt (default 3). */
  maxRetries?: number;
  /** Backoff base in milliseconds (default 250): retry n waits about `backoffMs * 2**n`, jittered. */
  backoffMs?: number;
  /** Ceiling of any wait, `Retry-After` included, in milliseconds (default 10 000; 0 .. 2^31-1). */
  maxWaitMs?: number;
  /** A fetch implementation (default: the global `fetch`). */
  fetch?: FetchLike;
}

/**
 * Bounded retries. Every call is retried on answers that say nothing was done (429, and a 503
 * with a `Retry-After` header and without `details.permanent` in its body: a 503 that says
 * extraction is not configured fails the same way every time), and when the request provably
 * never reached the server (connection refused, DNS failure, connect timeout). A failure that
 * may have reached it (a timeout, a reset, an answer cut short) is retried only for a
 * replayable call (a GET, `POST /v1/context`, a replay, a deduplicated write); any other call then throws
 * `HakiConnectionError` with an unknown outcome.
 *
 * A 409 `conflict` whose `details.reason` is `idempotency_key_in_progress` (the key's first
 * request has not committed yet) is retried too, with backoff and the same key.
 *
 * The wait before retry n (0-based) is the server's `Retry-After` when it sends one, else
 * `backoff * 2**n` with jitter. A `Retry-After` longer than `maxWait` is not cut short (a resend
 * before it would be refused again): the error is thrown at once, carrying `retryAfter`, so a
 * misbehaving server cannot park a caller for an hour either.
 */
export class RetryPolicy {
  constructor(
    readonly maxRetries = 3,
    readonly backoffMs = 250,
    readonly maxWaitMs = 10_000,
  ) {}

  /** Whether the client may wait out the server's `Retry-After` (seconds): none, or within maxWaitMs. */
  waitsFor(retryAfter: number | null): boolean {
    return retryAfter === null || retryAfter * 1000 <= this.maxWaitMs;
  }

  /** Milliseconds to wait before retry `attempt` (0-based); `retryAfter` in seconds. */
  delay(attempt: number, retryAfter: number | null): number {
    if (retryAfter !== null) return Math.max(0, Math.min(retryAfter * 1000, this.maxWaitMs));
    const base = Math.min(this.maxWaitMs, this.backoffMs * 2 ** attempt);
    // Full jitter in [base/2, base]: clients that failed together do not retry together.
    return base / 2 + (Math.random() * base) / 2;
  }
}

/** `Retry-After` is either delta-seconds or an HTTP date (RFC 9110 §10.2.3); seconds, or null. */
export function parseRetryAfter(value: string | null | undefined): number | null {
  if (!value) return null;
  const text = value.trim();
  if (/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(text)) return Math.max(0, Number(text));
  if (/^[+-]?(inf|infinity)$/i.test(text)) return text.startsWith("-") ? 0 : Infinity;
  if (/^[+-]?nan$/i.test(text)) return 0;
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - Date.now()) / 1000);
}

function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name];
}

const UUID_HEX = /^[0-9a-f]{32}$/i;

/**
 * Python's `str(UUID(value))`: braces, `urn:uuid:`, hyphens and spaces around accepted; lower-case,
 * hyphenated. A malformed id is an `InvalidArgument` naming `field`, before anything is sent.
 */
export function normaliseUuid(value: string, field = "id"): string {
  const text = typeof value === "string" ? value : String(value);
  let hex = text.trim().replace(/^urn:/i, "").replace(/^uuid:/i, "").replace(/^\{|\}$/g, "");
  hex = hex.replace(/-/g, "");
  if (!UUID_HEX.test(hex)) {
    throw new InvalidArgument(`${field}: a UUID is expected, got ${JSON.stringify(text).slice(0, 66)}`, field);
  }
  hex = hex.toLowerCase();
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** A 409 saying the Idempotency-Key's first request has not committed yet: retry it. */
function keyInProgress(response: Response, text: string): boolean {
  if (response.status !== 409) return false;
  try {
    const body = JSON.parse(text) as { details?: { reason?: unknown } | null };
    return body?.details?.reason === "idempotency_key_in_progress";
  } catch {
    return false;
  }
}

/**
 * 429 always; a 503, or a 502 (an extraction model that was busy), only when the server sent
 * `Retry-After` and did not mark it permanent; a 409 `idempotency_key_in_progress`.
 */
function shouldRetry(response: Response, text: string): boolean {
  if (response.status === 429) return true;
  if (response.status === 409) return keyInProgress(response, text);
  if ((response.status !== 502 && response.status !== 503) || parseRetryAfter(response.headers.get("retry-after")) === null) return false;
  try {
    const body = JSON.parse(text) as { details?: { permanent?: unknown } | null };
    return body?.details?.permanent !== true;
  } catch {
    return true;
  }
}

function iso(value: Date | string): string {
  return value instanceof Date ? value.toISOString() : value;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

type Params = Record<string, string | number | boolean | null | undefined>;

interface Call {
  method: string;
  path: string;
  params?: Params;
  body?: unknown;
  /** Milliseconds an attempt of this call may take, when it is not the client's timeoutMs. */
  timeoutMs?: number;
  /** The caller's Idempotency-Key of a deduplicated write; absent, the client makes one per call. */
  idempotencyKey?: string;
}

// What a header carries: an API key, and an Idempotency-Key of at most
// MAX_IDEMPOTENCY_KEY_CHARS (docs/spec/api.md, "Idempotency").
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;
const MAX_IDEMPOTENCY_KEY_CHARS = 255;

/**
 * A caller's Idempotency-Key, checked before anything is sent: 1..255 visible ASCII characters,
 * else `InvalidArgument` whose `field` is `idempotency_key`. Undefined: the client makes one.
 */
function checkIdempotencyKey(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || value.length > MAX_IDEMPOTENCY_KEY_CHARS || !VISIBLE_ASCII.test(value)) {
    const text = typeof value === "string" ? JSON.stringify(value) : String(value);
    // Named as the id arguments are (`fact_id`, `keep[1]`), and as in Python.
    const got = text.length > 66 ? `${text.slice(0, 66)}...` : text;
    throw new InvalidArgument(
      `idempotency_key: 1..255 visible ASCII characters (no space) are expected, got ${got}`,
      "idempotency_key",
    );
  }
  return value;
}

/** The options of a deduplicated write. */
export interface WriteOptions {
  projectId?: string;
  /**
   * Sent with every attempt instead of a key of the client's own (1..255 visible ASCII
   * characters, e.g. a UUID): sending the same call again with it, after the retries ran out,
   * gets the first answer back if it was written, and writes nothing twice.
   */
  idempotencyKey?: string;
}

/**
 * A duration option in milliseconds a timer can take: a finite number in [`min`, 2^31-1] (Node
 * fires a longer timer after 1 ms, `AbortSignal.timeout` refuses a fraction), a fraction rounded
 * up; else a `TypeError` naming `option`, at once rather than at every call.
 */
function checkMs(value: unknown, option: string, min: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || Math.ceil(value) < min || value > MAX_TIMER_MS) {
    const got = typeof value === "number" ? String(value) : typeof value;
    throw new TypeError(`${option}: milliseconds from ${min} to ${MAX_TIMER_MS} are expected, got ${got}`);
  }
  return Math.ceil(value);
}

/** A lost connection or a timed-out attempt: fetch rejects; the request may or may not have run. */
function isTransportError(error: unknown): boolean {
  if (error instanceof TypeError) return true; // fetch's "fetch failed" (refused, reset, DNS)
  const name = (error as { name?: string } | null)?.name;
  return name === "TimeoutError" || name === "AbortError";
}

// undici's `cause.code` of failures before a request is sent: refused, DNS, connect timeout.
const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "UND_ERR_CONNECT_TIMEOUT"]);

/** True when fetch failed before sending anything: the server cannot have applied the call. */
function neverSent(error: unknown): boolean {
  const cause = (error as { cause?: unknown } | null)?.cause as
    | { code?: unknown; syscall?: unknown; errors?: unknown }
    | null
    | undefined;
  if (!(error instanceof TypeError) || cause === null || typeof cause !== "object") return false;
  if (NOT_SENT_CODES.has(String(cause.code)) || cause.syscall === "connect" || cause.syscall === "getaddrinfo") {
    return true;
  }
  // Happy eyeballs (several addresses) fails with an AggregateError of each connect error.
  const all = cause.errors;
  return Array.isArray(all) && all.length > 0 && all.every((e) => neverSent(new TypeError("fetch failed", { cause: e })));
}

// The only writes the server deduplicates by Idempotency-Key (docs/spec/api.md, "Idempotency"):
// elsewhere a key is ignored, so a resent DELETE or resolve would run twice.
const DEDUPLICATED_WRITES = new Set(["POST /v1/facts", "POST /v1/events", "POST /v1/extract"]);

/** A call that changes no memory: a GET, `POST /v1/context` or a replay (each only writes its trace). */
function readsOnly(call: Call): boolean {
  if (call.method === "GET") return true;
  return call.method === "POST" && (call.path === "/v1/context" || /^\/v1\/inspect\/[^/]+\/replay$/.test(call.path));
}

function deduplicated(call: Call): boolean {
  return DEDUPLICATED_WRITES.has(`${call.method} ${call.path}`);
}

/** Whether sending a call again after a lost answer is harmless: it reads only, or is deduplicated. */
function isReplayable(call: Call): boolean {
  return readsOnly(call) || deduplicated(call);
}

export interface ListFactsOptions {
  status?: "active" | "superseded" | "retracted" | (string & {});
  limit?: number;
  cursor?: string;
  projectId?: string;
}

export interface ContextOptions {
  budgetTokens?: number;
  includeEpisodes?: boolean;
  /** "unified" or "facts_first"; absent, the deployment default (HAKI_CONTEXT_PROFILE) applies. */
  profile?: ContextProfile;
  projectId?: string;
  /** Build the packet the memory would have given at this instant (not in the future). */
  asOf?: Date | string;
}

export interface ReplayOptions {
  budgetTokens?: number;
  profile?: ContextProfile;
  recallMaxDistance?: number;
  asOf?: Date | string;
}

export interface FactStatsOptions {
  order?: "never_served" | "most_served" | "most_dropped";
  limit?: number;
  projectId?: string;
}

export interface ListEventsOptions {
  limit?: number;
  cursor?: string;
  projectId?: string;
}

export interface ListSubjectsOptions {
  limit?: number;
  cursor?: string;
  projectId?: string;
}

export interface CreateWebhookOptions {
  /** true: payloads carry the facts' texts; default false (ids, keys and counts only). */
  includeContent?: boolean;
  projectId?: string;
}

export interface ListWebhookDeliveriesOptions {
  /** Only deliveries with this status ("dead": the dead letters). */
  status?: WebhookDeliveryStatus;
  /** 1..500, default 50. */
  limit?: number;
}

export interface ExtractOptions extends WriteOptions {
  /** false: a dry run (the model is asked, nothing is written). Default true. */
  write?: boolean;
  /**
   * Per attempt, in milliseconds (default 120 000, or the client's timeoutMs when longer: the
   * server waits for its chat model).
   */
  timeoutMs?: number;
}

/** `what` shown in an error message: at most 60 characters, and nothing after an `@` (credentials). */
function shown(what: string): string {
  const text = what.includes("@") ? `${what.slice(0, what.indexOf("@"))}@...` : what;
  return JSON.stringify(text.length > 60 ? `${text.slice(0, 60)}...` : text);
}

/**
 * `baseUrl` as fetch needs it: an absolute http: or https: URL with a host. Without a scheme
 * ("localhost:8000" reads as the scheme `localhost:`), with another one, or with credentials
 * (fetch refuses a URL holding `user@`), every request would fail before reaching any server.
 */
function checkBaseUrl(value: unknown, option: string): void {
  if (typeof value !== "string") throw new TypeError(`${option}: a string is expected, got ${typeof value}`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TypeError(`${option}: not a URL: ${shown(value)}; expected http://host:port or https://host`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(
      `${option}: an http:// or https:// URL is expected (e.g. ${DEFAULT_BASE_URL}), got ${shown(value)}` +
        ` (its scheme reads as ${JSON.stringify(url.protocol)})`,
    );
  }
  if (url.username || url.password) {
    throw new TypeError(`${option}: holds credentials (user@ or user:password@): pass the key as apiKey instead`);
  }
  if (url.search || url.hash || value.includes("?") || value.includes("#")) {
    throw new TypeError(`${option}: a query (?) or fragment (#) cannot prefix the routes, got ${shown(value)}`);
  }
}

/** An API key a header can carry; the message never shows the key. Empty or absent: no key is sent. */
function checkApiKey(value: unknown, option: string): void {
  if (value === undefined || value === null || value === "") return;
  if (typeof value !== "string") throw new TypeError(`${option}: a string is expected, got ${typeof value}`);
  if (!VISIBLE_ASCII.test(value)) {
    throw new TypeError(
      `${option}: must be visible ASCII characters (no space, newline or other character): ` +
        "it is sent in the Authorization header",
    );
  }
}

/** A v4 UUID for an Idempotency-Key: Node 18 keeps `randomUUID` in node:crypto only. */
async function randomUuid(): Promise<string> {
  const found = (globalThis as { crypto?: Crypto }).crypto;
  if (typeof found?.randomUUID === "function") return found.randomUUID();
  // A name in a variable keeps bundlers and the type checker (no Node types here) from resolving it.
  const module = "node:crypto";
  return ((await import(module)) as { randomUUID(): string }).randomUUID();
}

export class Haki {
  readonly baseUrl: string;
  readonly projectId: string | undefined;
  readonly retry: RetryPolicy;
  readonly #apiKey: string | undefined;
  readonly #timeoutMs: number;
  readonly #fetch: FetchLike;

  /**
   * Throws a `TypeError` naming the option (or its environment variable) when `baseUrl` is not an
   * http: or https: URL with a host (no credentials, query or fragment) or `apiKey` is not
   * visible ASCII: fetch would refuse every request, which is no lost connection to retry; or
   * when `timeoutMs` or `maxWaitMs` is no wait a timer can take (`checkMs`).
   */
  constructor(options: HakiOptions = {}) {
    const baseUrl = options.baseUrl || env("HAKI_BASE_URL") || DEFAULT_BASE_URL;
    checkBaseUrl(baseUrl, options.baseUrl ? "baseUrl" : "baseUrl (from $HAKI_BASE_URL)");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey !== undefined ? options.apiKey : env("HAKI_API_KEY");
    checkApiKey(this.#apiKey, options.apiKey !== undefined ? "apiKey" : "apiKey (from $HAKI_API_KEY)");
    this.projectId = options.projectId;
    const maxWaitMs = checkMs(options.maxWaitMs ?? 10_000, "maxWaitMs", 0);
    this.retry = new RetryPolicy(options.maxRetries ?? 3, options.backoffMs ?? 250, maxWaitMs);
    this.#timeoutMs = checkMs(options.timeoutMs ?? 10_000, "timeoutMs", 1);
    const f = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (f === undefined) throw new TypeError("no fetch: pass options.fetch (Node 18+ has a global fetch)");
    this.#fetch = f;
  }

  /** The project a call names; undefined leaves it out, and the server reads it from the key. */
  #project(projectId: string | undefined): string | undefined {
    return projectId || this.projectId || undefined;
  }

  /**
   * What an attempt of a batch write (or a conflict resolution, whose statements the server
   * bounds as a batch's) may take: BATCH_WRITE_TIMEOUT_MS, or timeoutMs when longer.
   */
  #batchTimeoutMs(): number {
    return Math.max(BATCH_WRITE_TIMEOUT_MS, this.#timeoutMs);
  }

  /** A scoped request body: `project_id` first when there is one, then `fields`. */
  #body(projectId: string | undefined, fields: Record<string, unknown>): Record<string, unknown> {
    const project = this.#project(projectId);
    return project ? { project_id: project, ...fields } : fields;
  }

  /** A call of one project: `project_id` (the client's default when not given) leads the query. */
  #scoped(method: string, path: string, projectId: string | undefined, params: Params = {}): Call {
    return { method, path, params: { project_id: this.#project(projectId), ...params } };
  }

  /**
   * A subject route in its query form, /v1/subjects{suffix}?subject_id=: URL parsers drop a path
   * segment `.` or `..` (and `%2E`), and a segment cannot carry `/`; a query parameter carries any id.
   */
  #subject(method: string, subjectId: string, suffix: string, projectId: string | undefined): Call {
    return this.#scoped(method, `/v1/subjects${suffix}`, projectId, { subject_id: subjectId });
  }

  /** A context call's or a replay's wait: CONTEXT_TIMEOUT_MS, or timeoutMs when longer. */
  #contextTimeoutMs(): number {
    return Math.max(CONTEXT_TIMEOUT_MS, this.#timeoutMs);
  }

  /** An erasure: it may take the server's HAKI_ERASURE_TIMEOUT_MS, so never less than ERASURE_TIMEOUT_MS. */
  #erasure(call: Call): Call {
    return { ...call, timeoutMs: Math.max(ERASURE_TIMEOUT_MS, this.#timeoutMs) };
  }

  #url(call: Call): string {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(call.params ?? {})) {
      if (value === null || value === undefined) continue;
      query.append(name, String(value)); // booleans become "true"/"false", as in Python
    }
    const qs = query.toString();
    return `${this.baseUrl}${call.path}${qs ? `?${qs}` : ""}`;
  }

  #headers(): Record<string, string> {
    const headers: Record<string, string> = {
      Accept: "application/json",
      "User-Agent": `haki-client-typescript/${VERSION}`,
    };
    if (this.#apiKey) headers["Authorization"] = `Bearer ${this.#apiKey}`;
    return headers;
  }

  async #run<T>(call: Call): Promise<T> {
    const headers = this.#headers();
    let body: string | undefined;
    if (call.body !== undefined) {
      body = JSON.stringify(call.body);
      headers["Content-Type"] = "application/json";
    }
    // One key for every attempt of a deduplicated write: the server applies it once.
    const key = deduplicated(call) ? (call.idempotencyKey ?? (await randomUuid())) : undefined;
    if (key !== undefined) headers["Idempotency-Key"] = key;
    const url = this.#url(call);
    const timeoutMs = call.timeoutMs ?? this.#timeoutMs;
    const { response, text } = await this.#retried(call, isReplayable(call), key, async () => {
      const init: RequestInit = { method: call.method, headers, signal: AbortSignal.timeout(timeoutMs) };
      if (body !== undefined) init.body = body;
      const response = await this.#fetch(url, init);
      return { response, text: await response.text() };
    });
    return decode<T>(call, response, text);
  }

  /**
   * Makes `attempt`s of `call` until one answers with no reason to retry: after a lost connection
   * (only when `replayable`, or when it was never sent), a 429 or a 503 worth retrying (an answer
   * whose `text` was read), within the retry policy. Throws `HakiConnectionError` past it, and a
   * write's error answer (`writeError`: an earlier attempt may have applied it); `key`: a
   * deduplicated write's Idempotency-Key, which its errors carry.
   */
  async #retried<A extends { response: Response; text: string | null }>(
    call: Call,
    replayable: boolean,
    key: string | undefined,
    attempt: () => Promise<A>,
  ): Promise<A> {
    let unsent = true; // no attempt so far can have reached the server
    for (let n = 0; ; n += 1) {
      let answer: A;
      try {
        answer = await attempt();
      } catch (error) {
        if (!isTransportError(error)) throw error;
        unsent &&= neverSent(error);
        // Not replayable and maybe applied: the server would take a second attempt for a new call.
        if (n >= this.retry.maxRetries || !(replayable || neverSent(error))) {
          throw connectionError(call, error, unsent, key);
        }
        await sleep(this.retry.delay(n, null));
        continue;
      }
      const { response, text } = answer;
      const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
      // A Retry-After past maxWaitMs is not cut short: the error is thrown, carrying it.
      if (text !== null && shouldRetry(response, text) && n < this.retry.maxRetries && this.retry.waitsFor(retryAfter)) {
        // A write under this key is in flight: it may commit.
        unsent &&= !keyInProgress(response, text);
        await sleep(this.retry.delay(n, retryAfter));
        continue;
      }
      if (text !== null && !response.ok && !readsOnly(call)) throw writeError(call, response, text, key, unsent);
      return answer;
    }
  }

  // --- write side ---------------------------------------------------------------------------

  /**
   * Writes 1..1000 facts atomically; a plain string is a fact with only `content`.
   * `idempotencyKey`: the call's key for every attempt (WriteOptions), as for `writeEvents` and `extract`.
   */
  async writeFacts(
    subjectId: string,
    facts: ReadonlyArray<FactIn | string>,
    options: WriteOptions = {},
  ): Promise<WriteFactsResponse> {
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey);
    const body = this.#body(options.projectId, {
      subject_id: subjectId,
      facts: facts.map((f) => (typeof f === "string" ? { content: f } : f)),
    });
    const timeoutMs = this.#batchTimeoutMs();
    return this.#run({ method: "POST", path: "/v1/facts", body, timeoutMs, idempotencyKey });
  }

  async getFact(factId: string): Promise<Fact> {
    return this.#run({ method: "GET", path: `/v1/facts/${normaliseUuid(factId, "fact_id")}` });
  }

  async listFacts(subjectId?: string, options: ListFactsOptions = {}): Promise<FactPage> {
    const params = { subject_id: subjectId, status: options.status, limit: options.limit, cursor: options.cursor };
    return this.#run(this.#scoped("GET", "/v1/facts", options.projectId, params));
  }

  /** Every matching fact, page after page (keyset pagination). */
  async *iterFacts(
    subjectId?: string,
    options: { status?: ListFactsOptions["status"]; pageSize?: number; projectId?: string } = {},
  ): AsyncGenerator<Fact, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listFacts(subjectId, {
        status: options.status,
        limit: options.pageSize,
        cursor,
        projectId: options.projectId,
      });
      yield* page.facts;
      if (page.next_cursor === null || page.next_cursor === undefined) return;
      cursor = page.next_cursor;
    }
  }

  async patchFact(factId: string, changes: { status?: string; validTo?: Date | string } = {}): Promise<Fact> {
    const body: Record<string, unknown> = {};
    if (changes.status !== undefined) body["status"] = changes.status;
    if (changes.validTo !== undefined) body["valid_to"] = iso(changes.validTo);
    return this.#run({ method: "PATCH", path: `/v1/facts/${normaliseUuid(factId, "fact_id")}`, body });
  }

  async retractFact(factId: string): Promise<Fact> {
    return this.patchFact(factId, { status: "retracted" });
  }

  async writeEvents(
    subjectId: string,
    events: ReadonlyArray<EventIn>,
    options: WriteOptions = {},
  ): Promise<WriteEventsResponse> {
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey);
    const body = this.#body(options.projectId, { subject_id: subjectId, events });
    const timeoutMs = this.#batchTimeoutMs();
    return this.#run({ method: "POST", path: "/v1/events", body, timeoutMs, idempotencyKey });
  }

  async listConflicts(
    subjectId?: string,
    options: { status?: "open" | "resolved"; cursor?: string; projectId?: string } = {},
  ): Promise<ConflictList> {
    const params = { subject_id: subjectId, status: options.status, cursor: options.cursor };
    return this.#run(this.#scoped("GET", "/v1/conflicts", options.projectId, params));
  }

  /**
   * Keeps the `keep` members of an open conflict set and supersedes the others. The server gives
   * its statements HAKI_WRITE_TIMEOUT_PER_ITEM_MS a member, as a batch write: an attempt waits a
   * batch write's time (the set's member count is not known here). Not replayable: a lost answer
   * throws with the outcome unknown.
   */
  async resolveConflict(conflictSetId: string, keep: ReadonlyArray<string>): Promise<ConflictSet> {
    const path = `/v1/conflicts/${normaliseUuid(conflictSetId, "conflict_set_id")}/resolve`;
    const body = { keep: keep.map((id, i) => normaliseUuid(id, `keep[${i}]`)) };
    return this.#run({ method: "POST", path, body, timeoutMs: this.#batchTimeoutMs() });
  }

  // --- read side ----------------------------------------------------------------------------

  /**
   * The memory packet for `query`, within `budgetTokens`. `profile` picks the assembler's rules
   * for this call; absent, the deployment default applies. `asOf` asks for the packet the memory
   * would have given at that instant (docs/time-travel.md). An attempt waits CONTEXT_TIMEOUT_MS
   * (30 s), or timeoutMs when longer: on a slow embedder the server answers a `degraded` packet
   * after its HAKI_EMBED_TIMEOUT_SECONDS (10 s), past the default timeoutMs. As does `replay`.
   */
  async context(subjectId: string, query: string, options: ContextOptions = {}): Promise<ContextPacket> {
    const fields: Record<string, unknown> = { subject_id: subjectId, query };
    if (options.budgetTokens !== undefined) fields["budget_tokens"] = options.budgetTokens;
    if (options.includeEpisodes !== undefined) fields["include_episodes"] = options.includeEpisodes;
    if (options.profile !== undefined) fields["profile"] = options.profile;
    if (options.asOf !== undefined) fields["as_of"] = iso(options.asOf);
    const body = this.#body(options.projectId, fields);
    return this.#run({ method: "POST", path: "/v1/context", body, timeoutMs: this.#contextTimeoutMs() });
  }

  async inspect(traceId: string): Promise<Inspection> {
    return this.#run({ method: "GET", path: `/v1/inspect/${normaliseUuid(traceId, "trace_id")}` });
  }

  async stats(options: { projectId?: string } = {}): Promise<StatsOverview> {
    return this.#run(this.#scoped("GET", "/v1/stats/overview", options.projectId));
  }

  async healthz(): Promise<Health> {
    return this.#run({ method: "GET", path: "/healthz" });
  }

  /**
   * Rebuilds the packet of a traced call (by default as of the call's own instant, with its
   * budget, profile and floor; each option overrides one) and diffs it against the original:
   * `result.diff.added`, `.removed`, `.moved`. The replay is traced too.
   */
  async replay(traceId: string, options: ReplayOptions = {}): Promise<ReplayResponse> {
    const body: Record<string, unknown> = {};
    if (options.budgetTokens !== undefined) body["budget_tokens"] = options.budgetTokens;
    if (options.profile !== undefined) body["profile"] = options.profile;
    if (options.recallMaxDistance !== undefined) body["recall_max_distance"] = options.recallMaxDistance;
    if (options.asOf !== undefined) body["as_of"] = iso(options.asOf);
    const path = `/v1/inspect/${normaliseUuid(traceId, "trace_id")}/replay`;
    return this.#run({ method: "POST", path, body, timeoutMs: this.#contextTimeoutMs() });
  }

  /** What each active fact is worth: `order` "never_served", "most_served" (the server's default) or "most_dropped". */
  async factStats(subjectId?: string, options: FactStatsOptions = {}): Promise<FactStats> {
    const params = { subject_id: subjectId, order: options.order, limit: options.limit };
    return this.#run(this.#scoped("GET", "/v1/stats/facts", options.projectId, params));
  }

  // --- extraction ---------------------------------------------------------------------------

  /**
   * Stores each chat message as an event and the durable facts the server's chat model
   * (HAKI_EXTRACT_*) finds in them, linked to their events; `write: false` is a dry run.
   * `result.refused` lists what the model proposed and Haki refused, and why. Without a
   * configured model the server answers 503 `unavailable` naming the setting (`details.setting`),
   * marked permanent: it is not retried.
   */
  async extract(
    subjectId: string,
    messages: ReadonlyArray<ExtractMessage>,
    options: ExtractOptions = {},
  ): Promise<ExtractResult> {
    const idempotencyKey = checkIdempotencyKey(options.idempotencyKey);
    const body = this.#body(options.projectId, { subject_id: subjectId, messages, write: options.write ?? true });
    const asked = options.timeoutMs === undefined ? undefined : checkMs(options.timeoutMs, "timeoutMs", 1);
    const timeoutMs = asked ?? Math.max(EXTRACT_TIMEOUT_MS, this.#timeoutMs);
    return this.#run({ method: "POST", path: "/v1/extract", body, timeoutMs, idempotencyKey });
  }

  // --- memory lifecycle: erasure, listing, export -------------------------------------------

  /**
   * Erases every fact, event, conflict set and trace of the subject, in one transaction; answers
   * the count of each kind. Irreversible.
   */
  async eraseSubject(subjectId: string, options: { projectId?: string } = {}): Promise<SubjectErasure> {
    return this.#run(this.#erasure(this.#subject("DELETE", subjectId, "", options.projectId)));
  }

  /** Erases one fact (to stop serving it but keep it, use `retractFact`). */
  async deleteFact(factId: string): Promise<FactErasure> {
    return this.#run(this.#erasure({ method: "DELETE", path: `/v1/facts/${normaliseUuid(factId, "fact_id")}` }));
  }

  async deleteEvent(eventId: string): Promise<EventErasure> {
    return this.#run(this.#erasure({ method: "DELETE", path: `/v1/events/${normaliseUuid(eventId, "event_id")}` }));
  }

  async listEvents(subjectId?: string, options: ListEventsOptions = {}): Promise<EventPage> {
    const params = { subject_id: subjectId, limit: options.limit, cursor: options.cursor };
    return this.#run(this.#scoped("GET", "/v1/events", options.projectId, params));
  }

  /** Every matching event, page after page (keyset pagination). */
  async *iterEvents(
    subjectId?: string,
    options: { pageSize?: number; projectId?: string } = {},
  ): AsyncGenerator<Event, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listEvents(subjectId, { limit: options.pageSize, cursor, projectId: options.projectId });
      yield* page.events;
      if (page.next_cursor === null || page.next_cursor === undefined) return;
      cursor = page.next_cursor;
    }
  }

  async getEvent(eventId: string): Promise<Event> {
    return this.#run({ method: "GET", path: `/v1/events/${normaliseUuid(eventId, "event_id")}` });
  }

  async listSubjects(options: ListSubjectsOptions = {}): Promise<SubjectPage> {
    const params = { limit: options.limit, cursor: options.cursor };
    return this.#run(this.#scoped("GET", "/v1/subjects", options.projectId, params));
  }

  /**
   * The answer to a streamed GET, as #run would get it: sent again after a failure (a GET is
   * replayable), a 429 or a 503 worth retrying, until an answer's headers arrive. An answer that
   * is not a 200 stream is read whole here (`text`), so a failure reading it is retried too; a
   * 200 stream is returned unread with the controller that aborts it. Each attempt waits
   * `timeoutMs` at most.
   */
  async #openStream(call: Call): Promise<{ response: Response; text: string | null; controller: AbortController }> {
    const url = this.#url(call);
    const headers = this.#headers();
    return this.#retried(call, true, undefined, async () => {
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(timeoutError(this.#timeoutMs)), this.#timeoutMs);
      try {
        const response = await this.#fetch(url, { method: call.method, headers, signal: controller.signal });
        const text = response.status !== 200 || response.body === null ? await response.text() : null;
        return { response, text, controller };
      } finally {
        clearTimeout(timer);
      }
    });
  }

  /**
   * The subject's export document, line by line as it streams: the header, then every event,
   * every fact, every conflict set and an end line counting them (`line.kind`). `haki import FILE` reads the lines back. The request is retried as
   * a GET (as Python's client does) until its answer's headers arrive, never once lines stream:
   * a stream that breaks off throws `HakiConnectionError`. `timeoutMs` bounds each attempt's wait
   * for the headers and each wait for a chunk, not the whole document nor the caller's work on
   * the lines.
   */
  async *exportSubject(
    subjectId: string,
    options: { projectId?: string } = {},
  ): AsyncGenerator<ExportLine, void, undefined> {
    const call = this.#subject("GET", subjectId, "/export", options.projectId);
    const { response, text, controller } = await this.#openStream(call);
    if (text !== null) {
      if (response.status !== 200) throw errorFrom(response, text);
      for (const line of text.split("\n")) {
        const item = exportLine(call, line);
        if (item !== null) yield item;
      }
      return;
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => controller.abort(timeoutError(this.#timeoutMs)), this.#timeoutMs);
    };
    const lost = (error: unknown): unknown => (isTransportError(error) ? connectionError(call, error) : error);
    // Headers arrived: from here on nothing is sent again, lines may have been yielded.
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    let done = false;
    try {
      const decoder = new TextDecoder();
      let pending = "";
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        arm();
        try {
          chunk = await reader.read();
        } catch (error) {
          throw lost(error);
        }
        // Not while the caller works on the lines: the wait is the server's only.
        clearTimeout(timer);
        if (chunk.done) break;
        pending += decoder.decode(chunk.value, { stream: true });
        const lines = pending.split("\n");
        pending = lines.pop() ?? "";
        for (const line of lines) {
          const item = exportLine(call, line);
          if (item !== null) yield item;
        }
      }
      const last = exportLine(call, pending + decoder.decode());
      if (last !== null) yield last;
      done = true;
    } finally {
      clearTimeout(timer);
      // The caller stopped early (or an error): release the connection.
      if (!done) await reader.cancel().catch(() => undefined);
    }
  }

  // --- webhooks (docs/webhooks.md; verify deliveries with verifyWebhookSignature) ------------

  /**
   * Subscribes `url` to `events` of the project. The answer's `secret` (`whsec_...`) is shown
   * this once. Not replayable: after a lost answer, `listWebhooks` shows whether it was made.
   */
  async createWebhook(
    url: string,
    events: ReadonlyArray<WebhookEventType>,
    options: CreateWebhookOptions = {},
  ): Promise<WebhookCreated> {
    const fields: Record<string, unknown> = { url, events };
    if (options.includeContent !== undefined) fields["include_content"] = options.includeContent;
    return this.#run({ method: "POST", path: "/v1/webhooks", body: this.#body(options.projectId, fields) });
  }

  /** The project's webhooks, oldest first, with their deliveries by status (never a secret). */
  async listWebhooks(options: { projectId?: string } = {}): Promise<WebhookList> {
    return this.#run(this.#scoped("GET", "/v1/webhooks", options.projectId));
  }

  /** Deletes a webhook and its deliveries. */
  async deleteWebhook(webhookId: string): Promise<WebhookDeleted> {
    return this.#run({ method: "DELETE", path: `/v1/webhooks/${normaliseUuid(webhookId, "webhook_id")}` });
  }

  /** A webhook's deliveries, newest first; `status: "dead"` lists its dead letters. */
  async listWebhookDeliveries(
    webhookId: string,
    options: ListWebhookDeliveriesOptions = {},
  ): Promise<WebhookDeliveryList> {
    const path = `/v1/webhooks/${normaliseUuid(webhookId, "webhook_id")}/deliveries`;
    return this.#run({ method: "GET", path, params: { status: options.status, limit: options.limit } });
  }
}

const UNKNOWN =
  "the outcome is unknown, Haki may have applied it; check (GET the item) before sending it again, " +
  "or send a deduplicated write again with details.idempotency_key";

/**
 * The SDK's error for a call left without an answer: nothing was done (`unsent`: no attempt
 * reached the server), no answer to a read, or the outcome of a write is unknown. `key`: a
 * deduplicated write's Idempotency-Key, carried in `details`.
 */
function connectionError(call: Call, error: unknown, unsent = neverSent(error), key?: string): HakiConnectionError {
  const where = `${call.method} ${call.path}`;
  const cause = (error as { cause?: unknown } | null)?.cause;
  const what = cause === undefined ? String(error) : `${String(error)}: ${String(cause)}`;
  const keyed = key === undefined ? {} : { idempotency_key: key };
  if (unsent) {
    return new HakiConnectionError(`${where}: Haki was not reached, nothing was done: ${what}`, {
      cause: error,
      details: keyed,
    });
  }
  if (readsOnly(call)) return new HakiConnectionError(`${where}: no answer from Haki: ${what}`, { cause: error });
  return new HakiConnectionError(`${where}: the answer was lost (${what}): ${UNKNOWN}`, {
    cause: error,
    details: { outcome_unknown: true, ...keyed },
  });
}

/** A 502 or 504 whose body is not the contract's: a proxy's, that may have forwarded the request. */
function gatewayFailure(response: Response, text: string): boolean {
  return (response.status === 502 || response.status === 504) && errorBody(text) === null;
}

/**
 * The error of a write's last answer. Once an attempt may have reached the server (`unsent`
 * false: its answer was lost), or when the answer says the key's write is in flight or is a
 * gateway's, the outcome is unknown whatever the answer's code: a 429 or 503 speaks for its own
 * attempt only. A deduplicated write's error carries its key (as in Python).
 */
function writeError(call: Call, response: Response, text: string, key: string | undefined, unsent: boolean): HakiError {
  const error = errorFrom(response, text);
  const details: Record<string, unknown> = { ...error.details };
  if (key !== undefined) details["idempotency_key"] = key;
  const unknown = !unsent || keyInProgress(response, text) || gatewayFailure(response, text);
  if (unknown) details["outcome_unknown"] = true;
  const message = unknown ? `${error.message} (${call.method} ${call.path}: ${UNKNOWN})` : error.message;
  return errorFor(response.status, error.code, message, details, error.retryAfter);
}

/** The reason an attempt is aborted after `ms`: a `TimeoutError`, as `AbortSignal.timeout` gives. */
function timeoutError(ms: number): DOMException {
  return new DOMException(`no data within ${ms} ms`, "TimeoutError");
}

/** One line of an export document, parsed; null for a blank line. */
function exportLine(call: Call, line: string): ExportLine | null {
  if (!line.trim()) return null;
  try {
    const value: unknown = JSON.parse(line);
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new TypeError("not a JSON object");
    return value as ExportLine;
  } catch (error) {
    throw new HakiError(`unexpected export line for ${call.method} ${call.path}: ${String(error)}`, {
      code: "invalid_response",
      status: 200,
      cause: error,
    });
  }
}

function decode<T>(call: Call, response: Response, text: string): T {
  if (response.status >= 200 && response.status < 300) {
    try {
      const value: unknown = JSON.parse(text);
      if (value === null || typeof value !== "object") throw new TypeError("not a JSON object");
      return value as T;
    } catch (error) {
      throw new HakiError(`unexpected response body for ${call.method} ${call.path}: ${String(error)}`, {
        code: "invalid_response",
        status: response.status,
        cause: error,
      });
    }
  }
  throw errorFrom(response, text);
}

/** The contract's error body `{code, message, details}` in `text`, or null when it is none. */
function errorBody(text: string): { code: string; message: string; details: Record<string, unknown> | null } | null {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return null;
  }
  const b = body as { code?: unknown; message?: unknown; details?: unknown } | null;
  const isErrorBody =
    b !== null &&
    typeof b === "object" &&
    typeof b.code === "string" &&
    typeof b.message === "string" &&
    (b.details === undefined || b.details === null || (typeof b.details === "object" && !Array.isArray(b.details)));
  if (!isErrorBody) return null;
  return {
    code: b.code as string,
    message: b.message as string,
    details: (b.details as Record<string, unknown> | null | undefined) ?? null,
  };
}

/** The typed error of an error answer: the contract's `{code, message, details}` when it is one. */
export function errorFrom(response: Response, text: string): HakiError {
  const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
  const body = errorBody(text);
  if (body === null) {
    const fallback = text.trim().replace(/\n/g, " ").slice(0, 200) || response.statusText;
    return errorFor(response.status, null, fallback, null, retryAfter);
  }
  return errorFor(response.status, body.code, body.message, body.details, retryAfter);
}
