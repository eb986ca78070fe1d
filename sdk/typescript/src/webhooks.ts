/**
 * Verify a webhook delivery from Haki (docs/webhooks.md).
 *
 * Each delivery carries `Haki-Signature: t=<unix seconds>,v1=<hex>`, where `<hex>` is the
 * HMAC-SHA256 of `<t>.<raw body>` keyed by the webhook's secret (`whsec_...`, shown once when
 * the webhook was made). Verify the raw body, before parsing it:
 *
 *   if (!(await verifyWebhookSignature(rawBody, req.headers["haki-signature"], secret))) return 400;
 *   // `Haki-Event-Id` stays the same across retries: skip an event id already handled.
 *
 * Web Crypto only, so it runs in Node 18+, Deno, Bun and workers. The same rule, with the same
 * test vectors (sdk/webhook_vectors.json), is `verify_signature` of the Python SDK.
 */

export const SIGNATURE_HEADER = "Haki-Signature";
export const EVENT_ID_HEADER = "Haki-Event-Id";
/** A delivery signed longer ago than this (or this far ahead) is refused: a replayed request. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

export interface VerifyOptions {
  /** Seconds a signature's timestamp may differ from `now` (default 300). */
  toleranceSeconds?: number;
  /** The current time in Unix seconds (default: the clock). */
  now?: number;
}

async function subtleCrypto(): Promise<SubtleCrypto> {
  const found = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (found !== undefined) return found;
  // Node 18 keeps Web Crypto in node:crypto only; a name in a variable keeps bundlers and the
  // type checker (no Node types here) from resolving it.
  const module = "node:crypto";
  const nodeCrypto = (await import(module)) as { webcrypto: Crypto };
  return nodeCrypto.webcrypto.subtle;
}

function parts(header: string): { timestamp: number | null; signatures: string[] } {
  let timestamp: number | null = null;
  const signatures: string[] = [];
  for (const item of header.split(",")) {
    const at = item.indexOf("=");
    if (at < 0) continue;
    const name = item.slice(0, at).trim();
    const value = item.slice(at + 1).trim();
    if (name === "t" && /^[0-9]+$/.test(value)) timestamp = Number(value);
    else if (name === "v1") signatures.push(value);
  }
  return { timestamp, signatures };
}

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

function sameText(a: string, b: string): boolean {
  // Every character is compared whatever the first difference (no early exit on a mismatch).
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * True when `header` (the `Haki-Signature` value) signs `body` (the raw request body, as text
 * or bytes) under `secret`, at a time within `toleranceSeconds` of `now`.
 */
export async function verifyWebhookSignature(
  body: string | Uint8Array,
  header: string | null | undefined,
  secret: string,
  options: VerifyOptions = {},
): Promise<boolean> {
  if (!header) return false;
  const { timestamp, signatures } = parts(header);
  if (timestamp === null || signatures.length === 0) return false;
  const now = options.now ?? Date.now() / 1000;
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (Math.abs(now - timestamp) > tolerance) return false;
  const encoder = new TextEncoder();
  const raw = typeof body === "string" ? encoder.encode(body) : body;
  const prefix = encoder.encode(`${timestamp}.`);
  const signed = new Uint8Array(prefix.length + raw.length);
  signed.set(prefix, 0);
  signed.set(raw, prefix.length);
  const subtle = await subtleCrypto();
  const key = await subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const expected = hex(await subtle.sign("HMAC", key, signed));
  let valid = false;
  for (const candidate of signatures) valid = sameText(expected, candidate) || valid;
  return valid;
}
