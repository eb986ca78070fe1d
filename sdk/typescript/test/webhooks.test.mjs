// verifyWebhookSignature must agree with the server's signing and the Python SDK on the shared
// vectors (sdk/webhook_vectors.json; tests/test_webhooks.py runs the same cases in Python).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { verifyWebhookSignature } from "../dist/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../webhook_vectors.json", import.meta.url), "utf8"));

test("every shared vector verifies as expected", async () => {
  assert.ok(vectors.cases.length >= 10);
  for (const c of vectors.cases) {
    const got = await verifyWebhookSignature(c.body, c.header, vectors.secret, {
      now: c.now,
      toleranceSeconds: vectors.tolerance_seconds,
    });
    assert.equal(got, c.valid, c.name);
  }
});

test("bytes and text of the same body verify alike", async () => {
  const { timestamp, body, signature } = vectors.signing;
  const header = `t=${timestamp},v1=${signature}`;
  const bytes = new TextEncoder().encode(body);
  assert.equal(await verifyWebhookSignature(bytes, header, vectors.secret, { now: timestamp }), true);
  assert.equal(await verifyWebhookSignature(body, undefined, vectors.secret, { now: timestamp }), false);
});
