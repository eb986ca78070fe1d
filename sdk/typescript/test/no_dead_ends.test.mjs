// What the client retries, and what it needs, against a scripted local HTTP server (no Haki):
// a 503 is retried only when the server sends Retry-After and does not mark it permanent; no
// project id is needed (the key names it); a malformed id is the SDK's typed error.
import assert from "node:assert/strict";
import http from "node:http";
import { describe, test } from "node:test";

import { Haki, HakiError, InvalidArgument, Unavailable, ValidationError } from "../dist/index.js";

async function scripted(answers) {
  const seen = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    seen.push({ method: req.method, url: req.url, body: Buffer.concat(chunks).toString() });
    const [status, headers, body] = answers.shift() ?? [500, {}, ""];
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(body);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

const down = (details) => JSON.stringify({ code: "unavailable", message: "down", details });
const packet = JSON.stringify({ trace_id: "0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f", facts: [], episodes: [] });

describe("a 503 is retried only when the server asks for it", () => {
  test("without Retry-After: one attempt", async () => {
    const server = await scripted([[503, {}, down(null)]]);
    try {
      const haki = new Haki({ baseUrl: server.url, backoffMs: 1 });
      await assert.rejects(() => haki.context("s", "q"), Unavailable);
      assert.equal(server.seen.length, 1);
    } finally {
      await server.close();
    }
  });

  test("marked permanent: one attempt, even with Retry-After", async () => {
    const permanent = down({ setting: "HAKI_EXTRACT_BASE_URL", permanent: true });
    const server = await scripted([[503, { "retry-after": "0" }, permanent]]);
    try {
      const haki = new Haki({ baseUrl: server.url, backoffMs: 1 });
      const err = await haki.extract("s", [{ role: "user", content: "hi" }]).catch((e) => e);
      assert.ok(err instanceof Unavailable);
      assert.equal(err.details.permanent, true);
      assert.equal(server.seen.length, 1);
    } finally {
      await server.close();
    }
  });

  test("with Retry-After: retried", async () => {
    const server = await scripted([
      [503, { "retry-after": "0" }, down(null)],
      [200, {}, packet],
    ]);
    try {
      const haki = new Haki({ baseUrl: server.url, backoffMs: 1 });
      await haki.context("s", "q");
      assert.equal(server.seen.length, 2);
    } finally {
      await server.close();
    }
  });
});

describe("a 502 is retried only with Retry-After (a busy extraction model)", () => {
  test("with it, then without it: two attempts", async () => {
    const busy = (status) => JSON.stringify({ code: "extractor_error", message: "busy", details: { upstream_status: status } });
    const server = await scripted([
      [502, { "retry-after": "0" }, busy(429)],
      [502, {}, busy(500)],
    ]);
    try {
      const haki = new Haki({ baseUrl: server.url, backoffMs: 1 });
      const err = await haki.extract("s", [{ role: "user", content: "hi" }]).catch((e) => e);
      assert.ok(err instanceof HakiError);
      assert.equal(err.status, 502);
      assert.equal(err.details.upstream_status, 500);
      assert.equal(server.seen.length, 2);
    } finally {
      await server.close();
    }
  });
});

describe("the key names the project", () => {
  test("no projectId: bodies and queries name none", async () => {
    const server = await scripted([
      [200, {}, packet],
      [200, {}, JSON.stringify({ facts: [], next_cursor: null })],
      [201, {}, JSON.stringify({ facts: [] })],
    ]);
    try {
      const haki = new Haki({ baseUrl: server.url, apiKey: "hk_x" });
      assert.equal(haki.projectId, undefined);
      await haki.context("s", "q");
      await haki.listFacts("s");
      await haki.writeFacts("s", ["x"]);
      assert.deepEqual(JSON.parse(server.seen[0].body), { subject_id: "s", query: "q" });
      assert.equal(server.seen[1].url, "/v1/facts?subject_id=s");
      assert.deepEqual(JSON.parse(server.seen[2].body), { subject_id: "s", facts: [{ content: "x" }] });
    } finally {
      await server.close();
    }
  });
});

describe("argument errors are the SDK's typed errors", () => {
  const haki = new Haki({ baseUrl: "http://127.0.0.1:9", apiKey: "hk_x" });
  for (const [name, call, field] of [
    ["inspect", () => haki.inspect("trace_id: garbage"), "trace_id"],
    ["getFact", () => haki.getFact("nope"), "fact_id"],
    ["resolveConflict", () => haki.resolveConflict("set-1", ["0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f"]), "conflict_set_id"],
    ["resolveConflict keep", () => haki.resolveConflict("0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f", ["x"]), "keep[0]"],
    ["deleteEvent", () => haki.deleteEvent(""), "event_id"],
  ]) {
    test(`${name}: an InvalidArgument naming ${field}, nothing sent`, async () => {
      const err = await call().catch((e) => e);
      assert.ok(err instanceof InvalidArgument, String(err));
      assert.ok(err instanceof ValidationError && err instanceof HakiError);
      assert.equal(err.field, field);
      assert.equal(err.code, "validation_error");
      assert.equal(err.status, null);
    });
  }
});
