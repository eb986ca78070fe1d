/**
 * TypeScript client for Haki, the memory service for AI agents.
 *
 *   import { Haki, render } from "haki-client";
 *   const haki = new Haki({ baseUrl: "http://127.0.0.1:8000", apiKey: "hk_..." }); // the key names its project
 *   await haki.writeFacts("alice", ["Alice works at Acme as a data engineer."]);
 *   console.log(render(await haki.context("alice", "Where does Alice work?")));
 */
export {
  BATCH_WRITE_TIMEOUT_MS,
  CONTEXT_TIMEOUT_MS,
  DEFAULT_BASE_URL,
  ERASURE_TIMEOUT_MS,
  EXTRACT_TIMEOUT_MS,
  Haki,
  RetryPolicy,
  VERSION,
  errorFrom,
  normaliseUuid,
  parseRetryAfter,
} from "./client.js";
export type {
  ContextOptions,
  CreateWebhookOptions,
  ExtractOptions,
  FactStatsOptions,
  HakiOptions,
  ListEventsOptions,
  ListFactsOptions,
  ListSubjectsOptions,
  ListWebhookDeliveriesOptions,
  ReplayOptions,
  WriteOptions,
} from "./client.js";
export {
  BudgetExceeded,
  ConflictError,
  Forbidden,
  HakiConnectionError,
  HakiError,
  InvalidArgument,
  NotFound,
  RateLimited,
  Unauthorized,
  Unavailable,
  ValidationError,
  errorFor,
} from "./errors.js";
export { CLOSE_TAG, OPEN_TAG, hidden, isEmpty, render } from "./render.js";
export type { RenderOptions, RenderablePacket } from "./render.js";
export type * from "./types.js";
export {
  DEFAULT_TOLERANCE_SECONDS,
  EVENT_ID_HEADER,
  SIGNATURE_HEADER,
  verifyWebhookSignature,
} from "./webhooks.js";
export type { VerifyOptions } from "./webhooks.js";
