// The client against a real `haki serve` (HAKI_BASE_URL, HAKI_API_KEY, HAKI_PROJECT_ID: set by
// scripts/test_typescript.sh, which starts the server and creates the key), and its retries
// against real local HTTP servers scripted here: a proxy in front of Haki that fails, delays or
// drops chosen attempts, so the retries, Retry-After and the idempotency key are seen on the wire.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import http from "node:http";
import { before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  BATCH_WRITE_TIMEOUT_MS,
  BudgetExceeded,
  CONTEXT_TIMEOUT_MS,
  ConflictError,
  ERASURE_TIMEOUT_MS,
  Forbidden,
  Haki,
  HakiConnectionError,
  HakiError,
  InvalidArgument,
  NotFound,
  RateLimited,
  RetryPolicy,
  Unauthorized,
  Unavailable,
  ValidationError,
  normaliseUuid,
  parseRetryAfter,
  render,
} from "../dist/index.js";

const BASE_URL = process.env.HAKI_BASE_URL;
const API_KEY = process.env.HAKI_API_KEY;
const PROJECT = process.env.HAKI_PROJECT_ID;
const live = BASE_URL && API_KEY && PROJECT ? false : "needs a running Haki: run scripts/test_typescript.sh";
const unique = (name) => `${name}-${Math.random().toString(16).slice(2, 10)}`;

function pythonRender(packet, stateWarnings = false) {
  const script = fileURLToPath(new URL("./python_render.py", import.meta.url));
  const done = spawnSync(process.env.HAKI_PYTHON, [script], {
    input: JSON.stringify([{ packet, state_warnings: stateWarnings }]),
    encoding: "utf8",
    env: { ...process.env, PYTHONIOENCODING: "utf-8", PYTHONUTF8: "1" },
  });
  assert.equal(done.status, 0, done.stderr);
  return JSON.parse(done.stdout)[0].text;
}

// --- a scripted HTTP server, optionally proxying to Haki -------------------------------------

/** A server that answers every request `status` and `text` after `delayMs`. */
async function slowServer(delayMs, status, text) {
  const server = http.createServer((req, res) => {
    req.resume();
    setTimeout(() => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(text);
    }, delayMs);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * `script(attempt, req, body)` returns "proxy", "drop" (proxied, answer lost), "reset" (not
 * proxied, answer lost), "hang", or [status, headers, body].
 */
async function scripted(script) {
  const seen = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    seen.push({ method: req.method, url: req.url, headers: req.headers, body: body.toString(), at: Date.now() });
    const action = script(seen.length - 1, req, body);
    if (action === "hang") return; // never answers: the client's timeout must fire
    if (action === "reset") return req.socket.destroy(); // the answer is lost, as after a crash
    if (action === "proxy" || action === "drop") {
      const upstream = await fetch(`${BASE_URL}${req.url}`, {
        method: req.method,
        headers: Object.fromEntries(
          Object.entries(req.headers).filter(([k]) => !["host", "connection", "content-length"].includes(k)),
        ),
        body: ["GET", "HEAD"].includes(req.method) ? undefined : body,
      });
      const text = await upstream.text();
      if (action === "drop") {
        // Haki applied the write; its answer never reaches the client.
        req.socket.destroy();
        return;
      }
      res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "" });
      res.end(text);
      return;
    }
    const [status, headers, text] = action;
    res.writeHead(status, headers);
    res.end(text);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    seen,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}

const errorBody = (code, message) => JSON.stringify({ code, message, details: null });
const ID = "01a23046-5a3d-7012-91ae-e5a2d19f6346";

// --- no server needed -------------------------------------------------------------------------

describe("client pieces", () => {
  test("Retry-After: seconds or an HTTP date; the wait is capped by maxWaitMs", () => {
    assert.equal(parseRetryAfter("2"), 2);
    assert.equal(parseRetryAfter(" 1.5 "), 1.5);
    assert.equal(parseRetryAfter("-3"), 0);
    assert.equal(parseRetryAfter(null), null);
    assert.equal(parseRetryAfter("soon"), null);
    assert.equal(parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), 0); // in the past
    const future = new Date(Date.now() + 30_000).toUTCString();
    assert.ok(parseRetryAfter(future) > 25 && parseRetryAfter(future) <= 30);
    const policy = new RetryPolicy(3, 250, 10_000);
    assert.equal(policy.delay(0, 2), 2000);
    assert.equal(policy.delay(5, 3600), 10_000);
    for (let attempt = 0; attempt < 8; attempt += 1) {
      const wait = policy.delay(attempt, null);
      const base = Math.min(10_000, 250 * 2 ** attempt);
      assert.ok(wait >= base / 2 && wait <= base, `attempt ${attempt}: ${wait}`);
    }
  });

  test("ids are checked and normalised as Python's UUID() does", () => {
    const id = "01A23046-5A3D-7012-91AE-E5A2D19F6346";
    assert.equal(normaliseUuid(id), id.toLowerCase());
    assert.equal(normaliseUuid(`{${id}}`), id.toLowerCase());
    assert.equal(normaliseUuid(`urn:uuid:${id.replace(/-/g, "")}`), id.toLowerCase());
    assert.equal(normaliseUuid(`  ${id} `), id.toLowerCase());
    const err = (() => {
      try {
        normaliseUuid("../v1/facts", "trace_id");
      } catch (e) {
        return e;
      }
    })();
    assert.ok(err instanceof InvalidArgument && err instanceof ValidationError && err instanceof HakiError);
    assert.equal(err.field, "trace_id");
    assert.equal(err.code, "validation_error");
    assert.equal(err.status, null);
    assert.ok(err.message.startsWith("trace_id: a UUID is expected"), err.message);
  });

  test("a baseUrl fetch cannot use, or an apiKey no header can carry, throws at construction naming the option", () => {
    let sent = 0;
    const fetch = async () => {
      sent += 1;
      throw new TypeError("fetch failed");
    };
    const refused = (options, option, secret) => {
      assert.throws(
        () => new Haki({ fetch, ...options }),
        (e) =>
          e instanceof TypeError &&
          e.message.startsWith(`${option}: `) &&
          (secret === undefined || !e.message.includes(secret)),
        JSON.stringify(options),
      );
    };
    const badUrls = [
      "localhost:8000", // no scheme: `localhost:` reads as one
      "127.0.0.1:8000",
      "ftp://haki.example",
      "file:///tmp/haki",
      "not a url",
      "http://",
      "http://haki.example/?project=p",
      "http://haki.example/#top",
    ];
    for (const baseUrl of badUrls) refused({ baseUrl }, "baseUrl");
    refused({ baseUrl: "http://user:s3cret@haki.example" }, "baseUrl", "s3cret");
    for (const apiKey of ["hk_a\nb", "hk_\u20ac", "hk_cl\u00e9", " hk_x", "hk x", "hk_x\r\n"]) refused({ apiKey }, "apiKey", apiKey.trim());
    const saved = { url: process.env.HAKI_BASE_URL, key: process.env.HAKI_API_KEY };
    const restore = (name, value) => (value === undefined ? delete process.env[name] : (process.env[name] = value));
    try {
      process.env.HAKI_BASE_URL = "localhost:8000";
      refused({}, "baseUrl (from $HAKI_BASE_URL)");
      process.env.HAKI_BASE_URL = "http://127.0.0.1:8000";
      process.env.HAKI_API_KEY = "hk_\nx";
      refused({}, "apiKey (from $HAKI_API_KEY)");
    } finally {
      restore("HAKI_BASE_URL", saved.url);
      restore("HAKI_API_KEY", saved.key);
    }
    assert.equal(sent, 0, "nothing was sent, nothing retried");
    // What fetch takes: http or https, any case, a path prefix; an empty key sends none.
    assert.equal(new Haki({ fetch, baseUrl: "HTTPS://haki.example/prefix/", apiKey: "" }).baseUrl, "HTTPS://haki.example/prefix");
    assert.equal(new Haki({ fetch, baseUrl: "http://[::1]:8000", apiKey: "hk_AZaz09-_~+/=" }).baseUrl, "http://[::1]:8000");
  });
});

describe("retries, idempotency keys and errors on the wire", () => {
  test("a write retries 503 then 429 with one Idempotency-Key, honouring Retry-After", async () => {
    const server = await scripted((attempt) =>
      attempt === 0
        ? [503, { "content-type": "application/json", "retry-after": "1" }, errorBody("unavailable", "db down")]
        : attempt === 1
          ? [429, { "content-type": "application/json", "retry-after": "0" }, errorBody("rate_limited", "slow")]
          : [201, { "content-type": "application/json" }, JSON.stringify({ facts: [] })],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, apiKey: "hk_test", projectId: "p" });
      const out = await haki.writeFacts("s", ["a fact"]);
      assert.deepEqual(out, { facts: [] });
      assert.equal(server.seen.length, 3);
      const keys = server.seen.map((s) => s.headers["idempotency-key"]);
      assert.match(keys[0], /^[0-9a-f-]{36}$/);
      assert.deepEqual(new Set(keys).size, 1, "one key for every attempt of the call");
      assert.ok(server.seen[1].at - server.seen[0].at >= 990, "Retry-After: 1 was honoured");
      assert.equal(server.seen[0].headers["authorization"], "Bearer hk_test");
      assert.equal(server.seen[0].headers["content-type"], "application/json");
      assert.match(server.seen[0].headers["user-agent"], /^haki-client-typescript\//);
      assert.deepEqual(JSON.parse(server.seen[0].body), {
        project_id: "p",
        subject_id: "s",
        facts: [{ content: "a fact" }],
      });
      // A second call gets its own key.
      await haki.writeFacts("s", ["another"]);
      assert.notEqual(server.seen[3].headers["idempotency-key"], keys[0]);
    } finally {
      await server.close();
    }
  });

  test("reads carry no Idempotency-Key", async () => {
    const server = await scripted(() => [200, { "content-type": "application/json" }, '{"status":"ok"}']);
    try {
      await new Haki({ baseUrl: server.url }).healthz();
      assert.equal(server.seen[0].headers["idempotency-key"], undefined);
    } finally {
      await server.close();
    }
  });

  test("retries are bounded, then the error carries its code, status and Retry-After", async () => {
    const server = await scripted(() => [
      429,
      { "content-type": "application/json", "retry-after": "0" },
      JSON.stringify({ code: "rate_limited", message: "too many", details: { limit: 600 } }),
    ]);
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", maxRetries: 2 });
      const err = await haki.context("s", "q").catch((e) => e);
      assert.ok(err instanceof RateLimited && err instanceof HakiError);
      assert.equal(err.code, "rate_limited");
      assert.equal(err.status, 429);
      assert.equal(err.message, "too many");
      assert.deepEqual(err.details, { limit: 600 });
      assert.equal(err.retryAfter, 0);
      assert.equal(String(err), "rate_limited (HTTP 429): too many");
      assert.equal(server.seen.length, 3, "the first attempt and two retries");
    } finally {
      await server.close();
    }
  });

  test("a 503 past the retries is Unavailable; a non-contract body still maps to a code", async () => {
    const server = await scripted((attempt) =>
      attempt < 2
        ? [503, { "content-type": "application/json", "retry-after": "0" }, errorBody("unavailable", "down")]
        : [502, { "content-type": "text/html" }, "<html>\nBad gateway\n</html>"],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", maxRetries: 1 });
      const down = await haki.stats().catch((e) => e);
      assert.ok(down instanceof Unavailable);
      assert.equal(down.status, 503);
      const gateway = await haki.stats().catch((e) => e);
      assert.equal(gateway.constructor, HakiError);
      assert.equal(gateway.code, "error", "not the contract's server bug `internal`");
      assert.equal(gateway.status, 502);
      assert.equal(gateway.message, "<html> Bad gateway </html>");
    } finally {
      await server.close();
    }
  });

  test("a refused connection is retried, then a HakiConnectionError", async () => {
    const server = await scripted(() => [200, {}, "{}"]);
    const url = server.url;
    await server.close(); // nothing listens there now
    const haki = new Haki({ baseUrl: url, maxRetries: 2, backoffMs: 1 });
    const err = await haki.healthz().catch((e) => e);
    assert.ok(err instanceof HakiConnectionError);
    assert.equal(err.code, "connection_error");
    assert.equal(err.status, null);
  });

  test("an attempt that outlives timeoutMs is retried like a lost connection", async () => {
    const server = await scripted((attempt) =>
      attempt === 0 ? "hang" : [200, { "content-type": "application/json" }, '{"status":"ok"}'],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, timeoutMs: 300, backoffMs: 1 });
      assert.deepEqual(await haki.healthz(), { status: "ok" });
      assert.equal(server.seen.length, 2);
    } finally {
      await server.close();
    }
  });
});

// The policy of docs/typescript-sdk.md: a call that may have reached the server is sent again
// only when it is replayable (a GET, POST /v1/context, a replay, a write the server deduplicates by key).
describe("replayable calls, and calls whose outcome is unknown", () => {
  const message = [{ role: "user", content: "hi" }];
  // [call, replayable, carries an Idempotency-Key]
  const calls = [
    [(h) => h.getFact(ID), true, false],
    [(h) => h.listFacts("s"), true, false],
    [(h) => h.context("s", "q"), true, false],
    [(h) => h.writeFacts("s", ["f"]), true, true],
    [(h) => h.writeEvents("s", [{ content: "e", occurred_at: "2026-01-01T00:00:00Z" }]), true, true],
    [(h) => h.extract("s", message), true, true],
    [(h) => h.listWebhooks(), true, false],
    [(h) => h.listWebhookDeliveries(ID), true, false],
    [(h) => h.patchFact(ID, { status: "retracted" }), false, false],
    [(h) => h.resolveConflict(ID, [ID]), false, false],
    [(h) => h.replay(ID), true, false],
    [(h) => h.deleteFact(ID), false, false],
    [(h) => h.deleteEvent(ID), false, false],
    [(h) => h.eraseSubject("s"), false, false],
    [(h) => h.createWebhook("https://example.com/h", ["fact.retracted"]), false, false],
    [(h) => h.deleteWebhook(ID), false, false],
  ];
  const isOutcomeUnknown = (e) =>
    e instanceof HakiConnectionError &&
    e.details.outcome_unknown === true &&
    /outcome is unknown/.test(e.message) &&
    /may have applied/.test(e.message);

  test("a lost answer is sent again only for a replayable call; another throws, outcome unknown", async () => {
    // Each call's first attempt reaches the server, which then drops the connection.
    const answered = new Set();
    const server = await scripted((_, req) => {
      const call = `${req.method} ${req.url}`;
      if (answered.has(call)) return [200, { "content-type": "application/json" }, "{}"];
      answered.add(call);
      return "reset";
    });
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", backoffMs: 1 });
      for (const [call, replayable, keyed] of calls) {
        const before = server.seen.length;
        const out = await call(haki).catch((e) => e);
        const attempts = server.seen.slice(before);
        const what = `${attempts[0].method} ${attempts[0].url}`;
        if (replayable) assert.deepEqual(out, {}, what);
        else assert.ok(isOutcomeUnknown(out), `${what}: ${out}`);
        assert.equal(attempts.length, replayable ? 2 : 1, what);
        const keys = new Set(attempts.map((a) => a.headers["idempotency-key"]));
        assert.equal(keys.size, 1, `${what}: one key (or none) for every attempt`);
        assert.equal([...keys][0] !== undefined, keyed, `${what}: an Idempotency-Key only where the server honours it`);
      }
    } finally {
      await server.close();
    }
  });

  test("a timed-out attempt of a call that is not replayable is not sent again", async () => {
    const server = await scripted(() => "hang");
    try {
      const haki = new Haki({ baseUrl: server.url, timeoutMs: 200, backoffMs: 1 });
      const err = await haki.patchFact(ID, { status: "retracted" }).catch((e) => e);
      assert.ok(isOutcomeUnknown(err), String(err));
      assert.equal(err.cause.name, "TimeoutError");
      assert.equal(server.seen.length, 1);
    } finally {
      await server.close();
    }
  });

  test("a request that never reached the server is sent again, whatever the call", async () => {
    // A real refused connection: every attempt, then the plain connection error.
    const closed = await scripted(() => [200, {}, "{}"]);
    await closed.close();
    let tries = 0;
    const counting = (input, init) => ((tries += 1), fetch(input, init));
    const refused = new Haki({ baseUrl: closed.url, maxRetries: 2, backoffMs: 1, fetch: counting });
    const err = await refused.deleteFact(ID).catch((e) => e);
    assert.ok(err instanceof HakiConnectionError && !isOutcomeUnknown(err), String(err));
    assert.match(err.message, /^DELETE \/v1\/facts\/\S+: Haki was not reached, nothing was done: TypeError: fetch failed: Error: connect ECONNREFUSED/);
    assert.equal(err.cause.cause.code, "ECONNREFUSED");
    assert.equal(tries, 3);

    // What fetch (undici) throws for a connect timeout, a DNS failure, and every address
    // refused: `TypeError: fetch failed` with the cause's code; a reset afterwards is not sent again.
    const failed = (cause) => new TypeError("fetch failed", { cause });
    const coded = (code, extra = {}) => Object.assign(new Error(code), { code, ...extra });
    const failures = [
      failed(coded("UND_ERR_CONNECT_TIMEOUT")),
      failed(coded("ENOTFOUND", { syscall: "getaddrinfo" })),
      failed(new AggregateError([coded("ECONNREFUSED"), coded("ENETUNREACH", { syscall: "connect" })])),
      failed(coded("UND_ERR_SOCKET")),
    ];
    const sent = [];
    const scriptedFetch = async (input, init) => {
      sent.push(init.method);
      throw failures.shift();
    };
    const haki = new Haki({ baseUrl: "http://haki.invalid", backoffMs: 1, fetch: scriptedFetch });
    const lost = await haki.resolveConflict(ID, [ID]).catch((e) => e);
    assert.ok(isOutcomeUnknown(lost), String(lost));
    assert.equal(lost.cause.cause.code, "UND_ERR_SOCKET");
    assert.deepEqual(sent, ["POST", "POST", "POST", "POST"]);

    // A deduplicated write whose first attempt may have been applied: its outcome stays unknown.
    failures.push(failed(coded("ECONNRESET", { syscall: "read" })), ...Array(3).fill(failed(coded("ECONNREFUSED"))));
    const write = await haki.writeFacts("s", ["f"]).catch((e) => e);
    assert.ok(isOutcomeUnknown(write), String(write));
    assert.equal(sent.length, 8);
  });

  test("429 and a 503 with Retry-After are retried for every call: nothing was done", async () => {
    const json = { "content-type": "application/json" };
    const server = await scripted((attempt) =>
      [
        [503, { ...json, "retry-after": "0" }, errorBody("unavailable", "db down")],
        [429, { ...json, "retry-after": "0" }, errorBody("rate_limited", "slow")],
      ][attempt] ?? [200, json, '{"deleted":true}'],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, backoffMs: 1 });
      assert.deepEqual(await haki.deleteWebhook(ID), { deleted: true });
      assert.equal(server.seen.length, 3);
    } finally {
      await server.close();
    }
  });

  test(`erasures wait ERASURE_TIMEOUT_MS (${ERASURE_TIMEOUT_MS} ms), past the server's own 120 s, not timeoutMs`, async () => {
    assert.equal(ERASURE_TIMEOUT_MS, 125_000);
    // Every answer comes after 300 ms: past the client's timeoutMs of 100.
    const server = await slowServer(300, 200, "{}");
    try {
      const haki = new Haki({ baseUrl: server.url, timeoutMs: 100, maxRetries: 0 });
      for (const erase of [() => haki.deleteFact(ID), () => haki.deleteEvent(ID), () => haki.eraseSubject(".")]) {
        assert.deepEqual(await erase(), {});
      }
      await assert.rejects(() => haki.deleteWebhook(ID), HakiConnectionError);
    } finally {
      await server.close();
    }
  });
});

/** The per-attempt waits (ms) the client asks `AbortSignal.timeout` for while `run` runs. */
async function attemptWaits(run) {
  const original = AbortSignal.timeout;
  const waits = [];
  AbortSignal.timeout = (ms) => (waits.push(ms), original.call(AbortSignal, ms));
  try {
    await run();
  } finally {
    AbortSignal.timeout = original;
  }
  return waits;
}

const json = { "content-type": "application/json" };
const inProgress = JSON.stringify({
  code: "conflict",
  message: "A request with this Idempotency-Key is in progress; retry.",
  details: { idempotency_key: "k", reason: "idempotency_key_in_progress" },
});

describe("waits, caller keys and keys in progress", () => {
  test(`context and replay wait CONTEXT_TIMEOUT_MS (${CONTEXT_TIMEOUT_MS} ms), past the server's degraded answer, or timeoutMs when longer`, async () => {
    assert.equal(CONTEXT_TIMEOUT_MS, 30_000);
    // Every answer comes after 300 ms: past the client's timeoutMs of 100, as a degraded packet
    // comes after the server's 10 s embed timeout, past the default timeoutMs of 10 s.
    const server = await slowServer(300, 200, "{}");
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", timeoutMs: 100, maxRetries: 0 });
      assert.deepEqual(await haki.context("s", "q"), {});
      assert.deepEqual(await haki.replay(ID), {});
      await assert.rejects(() => haki.inspect(ID), HakiConnectionError);
    } finally {
      await server.close();
    }
    const fast = await scripted(() => [200, json, "{}"]);
    try {
      const waits = await attemptWaits(async () => {
        for (const timeoutMs of [10_000, 300_000]) {
          const haki = new Haki({ baseUrl: fast.url, timeoutMs });
          await haki.context("s", "q");
          await haki.replay(ID);
          await haki.inspect(ID);
        }
      });
      assert.deepEqual(waits, [30_000, 30_000, 10_000, 300_000, 300_000, 300_000]);
    } finally {
      await fast.close();
    }
  });

  test("extract waits 120 s, or timeoutMs when longer; its own timeoutMs when given", async () => {
    const server = await scripted(() => [200, json, "{}"]);
    try {
      const message = [{ role: "user", content: "hi" }];
      const waits = await attemptWaits(async () => {
        await new Haki({ baseUrl: server.url, timeoutMs: 10_000 }).extract("s", message);
        await new Haki({ baseUrl: server.url, timeoutMs: 300_000 }).extract("s", message);
        await new Haki({ baseUrl: server.url, timeoutMs: 300_000 }).extract("s", message, { timeoutMs: 5_000 });
      });
      assert.deepEqual(waits, [120_000, 300_000, 5_000]);
    } finally {
      await server.close();
    }
  });

  test("a caller's idempotencyKey is sent in every attempt of a write; a key the server refuses throws first", async () => {
    const key = `order-42:${"k".repeat(246)}`; // 255 visible ASCII characters, the server's bound
    const server = await scripted((attempt) =>
      attempt % 2 === 0 ? [503, { ...json, "retry-after": "0" }, errorBody("unavailable", "db down")] : [201, json, "{}"],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", backoffMs: 1 });
      const writes = [
        (k) => haki.writeFacts("s", ["f"], { idempotencyKey: k }),
        (k) => haki.writeEvents("s", [{ content: "e", occurred_at: "2026-01-01T00:00:00Z" }], { idempotencyKey: k }),
        (k) => haki.extract("s", [{ role: "user", content: "hi" }], { idempotencyKey: k }),
      ];
      for (const write of writes) assert.deepEqual(await write(key), {});
      assert.deepEqual(
        server.seen.map((s) => [s.url, s.headers["idempotency-key"]]),
        ["/v1/facts", "/v1/facts", "/v1/events", "/v1/events", "/v1/extract", "/v1/extract"].map((u) => [u, key]),
      );
      for (const write of writes) {
        for (const bad of ["", "a b", "k".repeat(256), "cl\u00e9", "a\n", 42]) {
          await assert.rejects(
            () => write(bad),
            (e) => e instanceof InvalidArgument && e.field === "idempotency_key" && e.message.startsWith("idempotency_key: "),
            JSON.stringify(bad),
          );
        }
      }
      assert.equal(server.seen.length, 6, "nothing sent for a refused key");
    } finally {
      await server.close();
    }
  });

  test("a 409 idempotency_key_in_progress is retried with the same key; a key reused with another body is not", async () => {
    const server = await scripted((attempt) =>
      attempt < 2 ? [409, json, inProgress] : attempt === 2 ? [201, json, "{}"] : [409, json, errorBody("conflict", "reused")],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", backoffMs: 1 });
      assert.deepEqual(await haki.writeFacts("s", ["f"]), {});
      assert.equal(server.seen.length, 3);
      assert.equal(new Set(server.seen.map((s) => s.headers["idempotency-key"])).size, 1);
      const reused = await haki.writeFacts("s", ["f"]).catch((e) => e);
      assert.ok(reused instanceof ConflictError, String(reused));
      assert.equal(server.seen.length, 4);
    } finally {
      await server.close();
    }
    // A write under the key was in flight: if the retries then cannot connect, it may have committed.
    const refused = Object.assign(new Error("ECONNREFUSED"), { code: "ECONNREFUSED" });
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      if (calls === 1) return new Response(inProgress, { status: 409, headers: json });
      throw new TypeError("fetch failed", { cause: refused });
    };
    const err = await new Haki({ baseUrl: "http://haki.invalid", backoffMs: 1, fetch })
      .writeFacts("s", ["f"], { idempotencyKey: "k" })
      .catch((e) => e);
    assert.ok(err instanceof HakiConnectionError && err.details.outcome_unknown === true, String(err));
    assert.equal(calls, 4);
  });

  test("a write whose answer was lost stays outcome unknown whatever error its retries end on, and carries its key", async () => {
    // The first attempt reached the server and its answer was lost: it may have committed.
    const endings = [
      [RateLimited, [[429, { ...json, "retry-after": "60" }, errorBody("rate_limited", "slow down")]]],
      [Unavailable, Array(3).fill([503, { ...json, "retry-after": "0" }, errorBody("unavailable", "down")])],
      [ConflictError, Array(3).fill([409, json, inProgress])],
    ];
    for (const [cls, later] of endings) {
      const server = await scripted((attempt) => (attempt === 0 ? "reset" : (later[attempt - 1] ?? [201, json, "{}"])));
      try {
        const haki = new Haki({ baseUrl: server.url, projectId: "p", backoffMs: 1 });
        const err = await haki.writeFacts("s", ["Bob is allergic to shellfish."]).catch((e) => e);
        const key = server.seen[0].headers["idempotency-key"];
        assert.ok(err instanceof cls, String(err));
        assert.equal(new Set(server.seen.map((s) => s.headers["idempotency-key"])).size, 1);
        assert.equal(err.details.outcome_unknown, true, String(err));
        assert.equal(err.details.idempotency_key, key);
        assert.match(err.message, /the outcome is unknown/);
        assert.deepEqual(await haki.writeFacts("s", ["Bob is allergic to shellfish."], { idempotencyKey: err.details.idempotency_key }), {});
        assert.equal(server.seen.at(-1).headers["idempotency-key"], key, "resent under the same key");
      } finally {
        await server.close();
      }
    }
    // Without a lost answer a 429 still says nothing was written, with the key; a key in flight
    // and a gateway's 504 page may stand for a write that commits; a read carries neither.
    const answers = [
      [[429, { ...json, "retry-after": "60" }, errorBody("rate_limited", "slow")], false],
      [[409, json, inProgress], true],
      [[504, { "content-type": "text/html" }, "<html>gateway time-out</html>"], true],
    ];
    for (const [answer, unknown] of answers) {
      const server = await scripted(() => answer);
      try {
        const haki = new Haki({ baseUrl: server.url, maxRetries: 0 });
        const err = await haki.writeEvents("s", [{ content: "e", occurred_at: "2026-01-01T00:00:00Z" }], { idempotencyKey: "mine" }).catch((e) => e);
        assert.equal(err.details.idempotency_key, "mine", String(err));
        assert.equal(err.details.outcome_unknown === true, unknown, String(err));
        const read = await haki.listFacts("s").catch((e) => e);
        assert.equal(read.details.outcome_unknown, undefined, String(read));
      } finally {
        await server.close();
      }
    }
  });

  test("a Retry-After longer than maxWaitMs throws at once, carrying it, instead of resending early", async () => {
    const server = await scripted((attempt) =>
      attempt === 0
        ? [429, { ...json, "retry-after": "60" }, errorBody("rate_limited", "slow down")]
        : attempt === 1
          ? [503, { ...json, "retry-after": "3600" }, errorBody("unavailable", "down")]
          : [200, json, "{}"],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", maxWaitMs: 10_000 });
      const started = Date.now();
      const limited = await haki.writeFacts("s", ["f"]).catch((e) => e);
      assert.ok(limited instanceof RateLimited, String(limited));
      assert.equal(limited.retryAfter, 60);
      const down = await (async () => {
        for await (const _ of haki.exportSubject("s")) void _;
      })().catch((e) => e);
      assert.ok(down instanceof Unavailable, String(down));
      assert.equal(down.retryAfter, 3600);
      assert.equal(server.seen.length, 2, "neither was sent again");
      assert.ok(Date.now() - started < 2_000);
    } finally {
      await server.close();
    }
  });
});

describe("lifecycle and extraction calls on the wire", () => {
  test("eraseSubject: the query form for every id, `.` and `..` included; no key (not deduplicated)", async () => {
    const erased = { project_id: "p", subject_id: "x", facts: 0, events: 0 };
    const server = await scripted(() => [200, { "content-type": "application/json" }, JSON.stringify(erased)]);
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p" });
      for (const id of ["a b?#%(c)", ".", "..", "%2E"]) await haki.eraseSubject(id);
      await haki.eraseSubject("team/alice", { projectId: "q" });
      assert.deepEqual(
        server.seen.map((s) => [s.method, s.url, s.headers["idempotency-key"], s.body]),
        [
          ["DELETE", "/v1/subjects?project_id=p&subject_id=a+b%3F%23%25%28c%29", undefined, ""],
          ["DELETE", "/v1/subjects?project_id=p&subject_id=.", undefined, ""],
          ["DELETE", "/v1/subjects?project_id=p&subject_id=..", undefined, ""],
          ["DELETE", "/v1/subjects?project_id=p&subject_id=%252E", undefined, ""],
          ["DELETE", "/v1/subjects?project_id=q&subject_id=team%2Falice", undefined, ""],
        ],
      );
    } finally {
      await server.close();
    }
  });

  test("deleteFact, deleteEvent, getEvent, listEvents, listSubjects: paths, ids and query parameters", async () => {
    const server = await scripted(() => [200, { "content-type": "application/json" }, '{"events":[],"subjects":[]}']);
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p" });
      const id = "01A23046-5A3D-7012-91AE-E5A2D19F6346";
      await haki.deleteFact(id);
      await haki.deleteEvent(`{${id}}`);
      await haki.getEvent(id);
      await haki.listEvents("s", { limit: 5, cursor: "c1" });
      await haki.listEvents();
      await haki.listSubjects({ limit: 2, cursor: "c2", projectId: "q" });
      const lower = id.toLowerCase();
      assert.deepEqual(
        server.seen.map((s) => [s.method, s.url, s.headers["idempotency-key"] !== undefined]),
        [
          ["DELETE", `/v1/facts/${lower}`, false],
          ["DELETE", `/v1/events/${lower}`, false],
          ["GET", `/v1/events/${lower}`, false],
          ["GET", "/v1/events?project_id=p&subject_id=s&limit=5&cursor=c1", false],
          ["GET", "/v1/events?project_id=p", false],
          ["GET", "/v1/subjects?project_id=q&limit=2&cursor=c2", false],
        ],
      );
      assert.throws(() => normaliseUuid("../v1/facts"), ValidationError);
      await assert.rejects(() => haki.deleteFact("../subjects/x"), (e) => e instanceof InvalidArgument && e.field === "fact_id");
    } finally {
      await server.close();
    }
  });

  test("extract: the body, write true by default, a 503 with Retry-After retried with one key like every write", async () => {
    const server = await scripted((attempt) =>
      attempt < 2
        ? [503, { "content-type": "application/json", "retry-after": "0" }, JSON.stringify({ code: "unavailable", message: "embedder down", details: null })]
        : [200, { "content-type": "application/json" }, '{"written":true,"events":[],"facts":[],"refused":[]}'],
    );
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", backoffMs: 1 });
      const messages = [{ role: "user", content: "I moved to Lyon." }];
      const out = await haki.extract("s", messages);
      assert.equal(out.written, true);
      assert.equal(server.seen.length, 3);
      assert.equal(new Set(server.seen.map((s) => s.headers["idempotency-key"])).size, 1);
      assert.deepEqual(
        server.seen.map((s) => [s.method, s.url]),
        Array(3).fill(["POST", "/v1/extract"]),
      );
      assert.deepEqual(JSON.parse(server.seen[0].body), { project_id: "p", subject_id: "s", messages, write: true });
      await haki.extract("s", messages, { write: false, projectId: "q" });
      assert.deepEqual(JSON.parse(server.seen[3].body), { project_id: "q", subject_id: "s", messages, write: false });
    } finally {
      await server.close();
    }
  });

  test("extract has its own timeout (default 120 s), not the client's timeoutMs", async () => {
    // Every answer comes after 300 ms: past the client's timeoutMs of 100, within extract's.
    const server = await slowServer(300, 200, '{"written":true}');
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", timeoutMs: 100, maxRetries: 0 });
      await assert.rejects(() => haki.stats(), HakiConnectionError);
      assert.deepEqual(await haki.extract("s", [{ role: "user", content: "hi" }]), { written: true });
      const err = await haki.extract("s", [{ role: "user", content: "hi" }], { timeoutMs: 100 }).catch((e) => e);
      assert.ok(err instanceof HakiConnectionError, String(err));
    } finally {
      await server.close();
    }
  });

  test("a batch write and a resolution wait BATCH_WRITE_TIMEOUT_MS, the server's documented budget; a read, timeoutMs", async () => {
    // The server's defaults (docs/spec/api.md, "Configuration") for a legal batch of MAX_BATCH
    // items: a connection, the write's embedding (queue included), a connection again, the store.
    const spec = readFileSync(fileURLToPath(new URL("../../../docs/spec/api.md", import.meta.url)), "utf8");
    const setting = (name) => Number(new RegExp(`\\| \`${name}\` \\| (\\d+) \\|`).exec(spec)[1]);
    const budgetMs =
      2 * 1000 * setting("HAKI_POOL_ACQUIRE_TIMEOUT_SECONDS") +
      1000 * setting("HAKI_EMBED_WRITE_TIMEOUT_SECONDS") +
      setting("HAKI_STATEMENT_TIMEOUT_MS") +
      1000 * setting("HAKI_WRITE_TIMEOUT_PER_ITEM_MS");
    assert.ok(BATCH_WRITE_TIMEOUT_MS >= budgetMs, `${BATCH_WRITE_TIMEOUT_MS} < ${budgetMs}`);
    // Every answer comes after 300 ms: past the client's timeoutMs of 100.
    const server = await slowServer(300, 201, '{"facts":[],"events":[]}');
    try {
      const haki = new Haki({ baseUrl: server.url, projectId: "p", timeoutMs: 100, maxRetries: 0 });
      const facts = Array.from({ length: 1000 }, (_, i) => `fact ${i}`);
      const events = [{ content: "e", occurred_at: "2026-01-01T00:00:00Z" }];
      const waits = await attemptWaits(async () => {
        assert.deepEqual(await haki.writeFacts("s", facts), { facts: [], events: [] });
        assert.deepEqual(await haki.writeFacts("s", ["one"]), { facts: [], events: [] });
        assert.deepEqual(await haki.writeEvents("s", events), { facts: [], events: [] });
        assert.deepEqual(await haki.resolveConflict(ID, [ID]), { facts: [], events: [] });
        await assert.rejects(() => haki.stats(), HakiConnectionError);
      });
      assert.deepEqual(waits, [...Array(4).fill(BATCH_WRITE_TIMEOUT_MS), 100]);
    } finally {
      await server.close();
    }
  });

  test("timeoutMs and maxWaitMs a timer cannot take throw a TypeError at construction; a fraction is rounded up", async () => {
    for (const timeoutMs of [0, -5, Infinity, NaN, 2 ** 31, "1000"]) {
      assert.throws(() => new Haki({ timeoutMs }), (e) => e instanceof TypeError && /^timeoutMs: milliseconds/.test(e.message), String(timeoutMs));
    }
    for (const maxWaitMs of [-1, Infinity, 2 ** 31]) {
      assert.throws(() => new Haki({ maxWaitMs }), (e) => e instanceof TypeError && /^maxWaitMs: /.test(e.message), String(maxWaitMs));
    }
    const server = await scripted(() => [200, json, '{"status":"ok"}']);
    try {
      const waits = await attemptWaits(async () => {
        for (const timeoutMs of [1500.5, (0.1 + 0.2) * 10_000, 2 ** 31 - 1]) {
          assert.deepEqual(await new Haki({ baseUrl: server.url, timeoutMs }).healthz(), { status: "ok" });
        }
      });
      assert.deepEqual(waits, [1501, 3001, 2 ** 31 - 1]);
      const haki = new Haki({ baseUrl: server.url });
      await assert.rejects(() => haki.extract("s", [{ role: "user", content: "x" }], { timeoutMs: Infinity }), TypeError);
    } finally {
      await server.close();
    }
  });

  test("exportSubject resends its request until the headers arrive, as Python does; never once lines stream", { timeout: 30_000 }, async () => {
    const json = { "content-type": "application/json" };
    const lines = [{ haki_export: 1, subject_id: "alice" }, { kind: "fact", fact_id: "f1" }];
    const body = lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
    // [what each attempt gets]: lost before the headers, 429, no answer within timeoutMs, a 503
    // with Retry-After, then the document; then a stream that breaks off after its first line.
    const script = [
      "reset",
      [429, { ...json, "retry-after": "0" }, errorBody("rate_limited", "slow")],
      "hang",
      [503, { ...json, "retry-after": "0" }, errorBody("unavailable", "db down")],
      [200, { "content-type": "application/x-ndjson" }, body],
      "broken",
    ];
    let seen = 0;
    const server = http.createServer((req, res) => {
      const action = script[seen++] ?? [500, json, errorBody("internal", "unexpected attempt")];
      if (action === "hang") return;
      if (action === "reset") return req.socket.destroy();
      if (action === "broken") {
        res.writeHead(200, { "content-type": "application/x-ndjson" });
        res.write(JSON.stringify(lines[0]) + "\n");
        setTimeout(() => req.socket.destroy(), 100);
        return;
      }
      res.writeHead(action[0], action[1]);
      res.end(action[2]);
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${server.address().port}`;
      const haki = new Haki({ baseUrl: url, projectId: "p", timeoutMs: 300, backoffMs: 1, maxRetries: 4 });
      const got = [];
      for await (const line of haki.exportSubject("alice")) got.push(line);
      assert.deepEqual(got, lines);
      assert.equal(seen, 5, "four failed attempts before the headers, each sent again");
      const partial = [];
      const err = await (async () => {
        for await (const line of haki.exportSubject("alice")) partial.push(line);
      })().catch((e) => e);
      assert.ok(err instanceof HakiConnectionError, String(err));
      assert.deepEqual(partial, [lines[0]]);
      assert.equal(seen, 6, "a stream that broke off is not sent again");
      // Past maxRetries, the last failure is thrown: a lost answer of a read.
      seen = 0;
      script.splice(0, script.length, "reset", "reset");
      const once = new Haki({ baseUrl: url, projectId: "p", backoffMs: 1, maxRetries: 1 });
      const lost = await (async () => {
        for await (const _ of once.exportSubject("alice")) void _;
      })().catch((e) => e);
      assert.ok(lost instanceof HakiConnectionError && /no answer from Haki/.test(lost.message), String(lost));
      assert.equal(seen, 2);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test("webhooks: routes, bodies and query parameters", async () => {
    const server = await scripted(() => [200, { "content-type": "application/json" }, "{}"]);
    const haki = new Haki({ baseUrl: server.url, projectId: "p" });
    try {
      await haki.createWebhook("https://hooks.example.com/h", ["fact.retracted", "subject.erased"]);
      await haki.createWebhook("https://hooks.example.com/c", ["conflict.opened"], { includeContent: true, projectId: "q" });
      await haki.listWebhooks();
      await haki.listWebhookDeliveries(ID.toUpperCase());
      await haki.listWebhookDeliveries(`{${ID}}`, { status: "dead", limit: 5 });
      await haki.deleteWebhook(ID);
      assert.deepEqual(
        server.seen.map((s) => [s.method, s.url, s.body && JSON.parse(s.body)]),
        [
          ["POST", "/v1/webhooks", { project_id: "p", url: "https://hooks.example.com/h", events: ["fact.retracted", "subject.erased"] }],
          ["POST", "/v1/webhooks", { project_id: "q", url: "https://hooks.example.com/c", events: ["conflict.opened"], include_content: true }],
          ["GET", "/v1/webhooks?project_id=p", ""],
          ["GET", `/v1/webhooks/${ID}/deliveries`, ""],
          ["GET", `/v1/webhooks/${ID}/deliveries?status=dead&limit=5`, ""],
          ["DELETE", `/v1/webhooks/${ID}`, ""],
        ],
      );
      await assert.rejects(() => haki.deleteWebhook("../facts"), (e) => e instanceof InvalidArgument && e.field === "webhook_id");
      await assert.rejects(() => haki.listWebhookDeliveries("x"), (e) => e instanceof InvalidArgument && e.field === "webhook_id");
      assert.equal(server.seen.length, 6, "nothing sent for a malformed id");
    } finally {
      await server.close();
    }
  });

  // A stream the client aborts for good can leave the test waiting: it fails at its timeout instead.
  test("exportSubject: JSON Lines parsed as they stream, across chunk boundaries; errors are typed", { timeout: 30_000 }, async () => {
    const lines = [
      { haki_export: 1, project_id: "p", subject_id: "team/alice", exported_at: "2026-01-01T00:00:00Z" },
      { kind: "event", event_id: "e1", content: "caf\u00e9 \u2615" },
      { kind: "fact", fact_id: "f1", content: "Alice likes tea." },
    ];
    const bytes = Buffer.from(lines.map((l) => JSON.stringify(l)).join("\r\n") + "\n\n");
    const server = http.createServer((req, res) => {
      if (req.url.endsWith("subject_id=missing")) {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(errorBody("not_found", "No fact or event of this subject in the project."));
        return;
      }
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      // Three-byte chunks: lines, and a UTF-8 character, split across reads.
      let at = 0;
      const next = () => {
        if (at >= bytes.length) return res.end();
        res.write(bytes.subarray(at, at + 3));
        at += 3;
        setImmediate(next);
      };
      next();
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${server.address().port}`;
    const seen = [];
    const recording = (input, init) => {
      seen.push([init.method, input.slice(url.length), init.headers["Idempotency-Key"]]);
      return fetch(input, init);
    };
    try {
      const haki = new Haki({ baseUrl: url, projectId: "p", fetch: recording });
      const got = [];
      for await (const line of haki.exportSubject("team/alice")) got.push(line);
      assert.deepEqual(got, lines);
      const first = [];
      for await (const line of haki.exportSubject("alice")) {
        first.push(line);
        break; // stopping early releases the stream
      }
      assert.deepEqual(first, [lines[0]]);
      const missing = await (async () => {
        for await (const _ of haki.exportSubject("missing")) void _;
      })().catch((e) => e);
      assert.ok(missing instanceof NotFound);
      assert.equal(missing.status, 404);
      assert.deepEqual(seen, [
        ["GET", "/v1/subjects/export?project_id=p&subject_id=team%2Falice", undefined],
        ["GET", "/v1/subjects/export?project_id=p&subject_id=alice", undefined],
        ["GET", "/v1/subjects/export?project_id=p&subject_id=missing", undefined],
      ]);
      // timeoutMs bounds the server's waits only: a caller slower than it on each line is fine.
      const slow = [];
      for await (const line of new Haki({ baseUrl: url, projectId: "p", timeoutMs: 100 }).exportSubject("a")) {
        slow.push(line);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      assert.deepEqual(slow, lines);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

// --- against the real server ------------------------------------------------------------------

describe("against a real haki serve", { skip: live }, () => {
  let haki;
  before(() => {
    haki = new Haki({ baseUrl: BASE_URL, apiKey: API_KEY, projectId: PROJECT });
  });

  test("the served OpenAPI is the snapshot the types were generated from", async () => {
    const served = await (await fetch(`${BASE_URL}/docs/openapi.json`)).json();
    const snapshot = JSON.parse(readFileSync(new URL("../openapi.json", import.meta.url), "utf8"));
    assert.deepEqual(
      served,
      snapshot,
      "sdk/typescript/openapi.json differs from what the server serves: run `just ts-types`",
    );
  });

  test("every route, and render() equal to Python's for the packets served", async () => {
    const subject = unique("alice");
    assert.equal((await haki.healthz()).status, "ok");
    const written = await haki.writeFacts(subject, [
      { content: "Alice works at Acme as a data engineer.", key: "employer", valid_from: "2024-03-01T00:00:00Z" },
      "Alice lives in Lyon with her cat Miso.",
      { content: "Alice prefers tea over coffee.", metadata: { source: "chat" } },
    ]);
    assert.deepEqual(
      written.facts.map((f) => f.status),
      ["active", "active", "active"],
    );
    const employerId = written.facts[0].fact_id;
    const fact = await haki.getFact(employerId.toUpperCase());
    assert.equal(fact.key, "employer");
    assert.equal(fact.subject_id, subject);

    const page = await haki.listFacts(subject, { limit: 2 });
    assert.equal(page.facts.length, 2);
    assert.ok(page.next_cursor);
    const all = [];
    for await (const f of haki.iterFacts(subject, { pageSize: 2 })) all.push(f.fact_id);
    assert.equal(all.length, 3);

    assert.equal((await haki.retractFact(written.facts[2].fact_id)).status, "retracted");
    const until = new Date(Date.now() + 365 * 86_400_000);
    const patched = await haki.patchFact(written.facts[1].fact_id, { validTo: until });
    assert.equal(new Date(patched.valid_to).getTime(), until.getTime());

    const events = await haki.writeEvents(subject, [
      { content: "Alice presented the Acme Q3 roadmap.", occurred_at: "2025-05-02T00:00:00Z" },
      { content: "Alice adopted a cat.", occurred_at: "2023-11-20T09:00:00+00:00" },
    ]);
    assert.equal(events.events.length, 2);

    const clash = await haki.writeFacts(subject, [{ content: "Alice works at Globex.", key: "employer" }]);
    const conflictSetId = clash.facts[0].conflict_set_id;
    assert.ok(conflictSetId);
    const conflicts = await haki.listConflicts(subject, { status: "open" });
    assert.deepEqual(
      conflicts.conflicts.map((c) => c.conflict_set_id),
      [conflictSetId],
    );

    const blocked = await haki.context(subject, "Where does Alice work?");
    assert.equal(blocked.status, "degraded");
    assert.ok(blocked.warnings[0].startsWith("open_conflict: 2"));

    const resolved = await haki.resolveConflict(conflictSetId, [employerId]);
    assert.equal(resolved.status, "resolved");
    const again = await haki.resolveConflict(conflictSetId, [employerId]).catch((e) => e);
    assert.ok(again instanceof ConflictError);
    assert.equal(again.status, 409);

    const packet = await haki.context(subject, "Where does Alice work and what did she present?", {
      budgetTokens: 400,
    });
    assert.equal(packet.status, "ok");
    assert.ok(packet.facts.length && packet.episodes.length);
    const block = render(packet);
    assert.ok(block.startsWith("<haki_memory>\nFacts:\n") && block.endsWith("</haki_memory>"));
    assert.ok(block.includes("- [2025-05-02] Alice presented the Acme Q3 roadmap."));
    assert.ok(block.includes("Alice works at Acme as a data engineer. (since 2024-03-01)"));
    if (process.env.HAKI_PYTHON) {
      assert.equal(block, pythonRender(packet));
      assert.equal(render(blocked, { stateWarnings: true }), pythonRender(blocked, true));
    }

    const trace = await haki.inspect(packet.trace_id);
    assert.equal(trace.subject_id, subject);
    const included = trace.decisions.filter((d) => d.decision === "included");
    assert.equal(included.length, packet.facts.length + packet.episodes.length);

    const replayed = await haki.replay(packet.trace_id, { budgetTokens: 5 });
    assert.equal(replayed.origin_trace_id, packet.trace_id);
    assert.ok(replayed.diff.removed.length > 0);

    const usage = await haki.factStats(subject, { order: "most_served" });
    assert.ok(usage.facts.some((f) => f.fact_id === employerId && f.served_count >= 1));
    const stats = await haki.stats();
    assert.ok(stats.context_calls >= 2);
  });

  test("held-back memory: isEmpty packet, stateWarnings block, as in Python", async () => {
    const subject = unique("maya");
    await haki.writeFacts(subject, [
      { content: "Maya works at Hooli.", key: "employer" },
      { content: "Maya works at Pied Piper.", key: "employer" },
    ]);
    const packet = await haki.context(subject, "Where does Maya work?");
    assert.equal(render(packet), "");
    const block = render(packet, { stateWarnings: true });
    assert.ok(block.startsWith("<haki_memory>\nNothing served: 2 fact(s) about this subject are known but held back"));
    if (process.env.HAKI_PYTHON) assert.equal(block, pythonRender(packet, true));
  });

  test("errors carry their code, status, message and details", async () => {
    const bad = new Haki({ baseUrl: BASE_URL, apiKey: "hk_not_a_real_key", projectId: PROJECT });
    assert.equal((await bad.healthz()).status, "ok"); // /healthz needs no key
    const unauthorized = await bad.stats().catch((e) => e);
    assert.ok(unauthorized instanceof Unauthorized);
    assert.equal(unauthorized.status, 401);

    const forbidden = await haki.context("s", "q", { projectId: "another-project" }).catch((e) => e);
    assert.ok(forbidden instanceof Forbidden);
    assert.equal(forbidden.code, "forbidden");

    const missing = await haki.getFact("01a23046-59f4-7389-b3b9-000000000000").catch((e) => e);
    assert.ok(missing instanceof NotFound);
    assert.equal(missing.status, 404);

    const budget = await haki.context("s", "q", { budgetTokens: 0 }).catch((e) => e);
    assert.ok(budget instanceof BudgetExceeded && budget instanceof ValidationError);
    assert.equal(budget.code, "budget_exceeded");

    const invalid = await haki.writeFacts("s", [{ content: "" }]).catch((e) => e);
    assert.ok(invalid instanceof ValidationError);
    assert.equal(invalid.code, "validation_error");
    assert.equal(invalid.status, 400);
    assert.ok(invalid.field && invalid.field.includes("facts"), JSON.stringify(invalid.details));
    assert.ok(invalid.message.length > 0);

    const profile = await haki.context("s", "q", { profile: "newest" }).catch((e) => e);
    assert.ok(profile instanceof ValidationError && profile.field.includes("profile"));
  });

  describe("through a proxy that loses answers", () => {
    test("a write whose answer was lost is retried with its key and applied once", async () => {
      const proxy = await scripted((attempt) => (attempt === 0 ? "drop" : "proxy"));
      try {
        const subject = unique("lost");
        const viaProxy = new Haki({ baseUrl: proxy.url, apiKey: API_KEY, projectId: PROJECT, backoffMs: 1 });
        const out = await viaProxy.writeFacts(subject, ["Lost answers must not duplicate facts."]);
        assert.equal(proxy.seen.length, 2, "the first answer was dropped, the retry got one");
        assert.equal(proxy.seen[0].headers["idempotency-key"], proxy.seen[1].headers["idempotency-key"]);
        const page = await haki.listFacts(subject);
        assert.equal(page.facts.length, 1, "applied once");
        assert.equal(page.facts[0].fact_id, out.facts[0].fact_id, "the retry got the first write's answer");
      } finally {
        await proxy.close();
      }
    });

    test("a write whose answer was lost, then a 429: outcome unknown, and a resend under its key writes once", async () => {
      const limited = [429, { "content-type": "application/json", "retry-after": "60" }, errorBody("rate_limited", "slow down")];
      const proxy = await scripted((attempt) => (attempt === 0 ? "drop" : attempt === 1 ? limited : "proxy"));
      try {
        const subject = unique("lost429");
        const viaProxy = new Haki({ baseUrl: proxy.url, apiKey: API_KEY, projectId: PROJECT, backoffMs: 1 });
        const err = await viaProxy.writeFacts(subject, ["Bob is allergic to shellfish."]).catch((e) => e);
        assert.ok(err instanceof RateLimited && err.details.outcome_unknown === true, String(err));
        const key = err.details.idempotency_key;
        assert.equal(key, proxy.seen[0].headers["idempotency-key"]);
        await viaProxy.writeFacts(subject, ["Bob is allergic to shellfish."], { idempotencyKey: key });
        assert.equal((await haki.listFacts(subject)).facts.length, 1, "the first attempt's write, once");
      } finally {
        await proxy.close();
      }
    });

    test("a resolution and erasures whose answers were lost: outcome unknown, applied once, not sent again", async () => {
      // Haki applies each write; the first answer of each is dropped, as a crashed proxy would.
      const dropped = new Set();
      const proxy = await scripted((_, req) => {
        const call = `${req.method} ${req.url}`;
        if (req.method === "GET" || dropped.has(call)) return "proxy";
        dropped.add(call);
        return "drop";
      });
      try {
        const subject = unique("unknown");
        const viaProxy = new Haki({ baseUrl: proxy.url, apiKey: API_KEY, projectId: PROJECT, backoffMs: 1 });
        const written = await haki.writeFacts(subject, [
          { content: "Bo works at Acme.", key: "employer" },
          { content: "Bo works at Globex.", key: "employer" },
          "Bo likes chess.",
        ]);
        const [acme, , chess] = written.facts;
        const lost = [
          () => viaProxy.resolveConflict(acme.conflict_set_id, [acme.fact_id]),
          () => viaProxy.deleteFact(chess.fact_id),
          () => viaProxy.eraseSubject(subject),
        ];
        for (const call of lost) {
          const before = proxy.seen.length;
          const err = await call().catch((e) => e);
          assert.ok(err instanceof HakiConnectionError && err.details.outcome_unknown === true, String(err));
          assert.match(err.message, /outcome is unknown, Haki may have applied it/);
          assert.equal(proxy.seen.length - before, 1, "not sent again");
          if (call === lost[0]) {
            const [set] = (await haki.listConflicts(subject)).conflicts;
            assert.equal(set.status, "resolved", "Haki applied it");
          }
        }
        assert.ok((await haki.getFact(chess.fact_id).catch((e) => e)) instanceof NotFound);
        assert.deepEqual((await haki.listFacts(subject)).facts, []);
      } finally {
        await proxy.close();
      }
    });

    test("503 from the service path is retried after Retry-After, then reaches Haki", async () => {
      const proxy = await scripted((attempt) =>
        attempt === 0
          ? [503, { "content-type": "application/json", "retry-after": "1" }, errorBody("unavailable", "busy")]
          : "proxy",
      );
      try {
        const subject = unique("busy");
        const viaProxy = new Haki({ baseUrl: proxy.url, apiKey: API_KEY, projectId: PROJECT });
        await viaProxy.writeEvents(subject, [{ content: "Busy retried.", occurred_at: "2026-01-02T03:04:05Z" }]);
        assert.ok(proxy.seen[1].at - proxy.seen[0].at >= 990);
        const packet = await haki.context(subject, "busy retried");
        assert.equal(packet.episodes.length, 1);
      } finally {
        await proxy.close();
      }
    });
  });

});

describe("memory lifecycle and extraction against a real haki serve", { skip: live }, () => {
  let haki;
  before(() => {
    haki = new Haki({ baseUrl: BASE_URL, apiKey: API_KEY, projectId: PROJECT });
  });

  const collect = async (iterable) => {
    const out = [];
    for await (const item of iterable) out.push(item);
    return out;
  };

  for (const [label, name] of [
    ["a plain id", "erase"],
    ["an id holding a slash", "team/erase"],
  ]) {
    test(`eraseSubject (${label}) erases everything; the subject is then empty`, async () => {
      const subject = unique(name);
      const other = unique("kept");
      await haki.writeFacts(subject, ["Erase me, fact one.", { content: "Erase me, fact two.", key: "k" }]);
      await haki.writeFacts(subject, [{ content: "Erase me, a clash.", key: "k" }]);
      await haki.writeEvents(subject, [{ content: "Erase me, event.", occurred_at: "2026-01-02T03:04:05Z" }]);
      await haki.writeFacts(other, ["Another subject stays."]);
      await haki.context(subject, "erase me");

      const erased = await haki.eraseSubject(subject);
      assert.equal(erased.subject_id, subject);
      assert.equal(erased.project_id, PROJECT);
      assert.equal(erased.facts, 3);
      assert.equal(erased.events, 1);
      assert.equal(erased.conflict_sets, 1);
      assert.equal(erased.context_calls, 1);
      assert.ok(!Number.isNaN(Date.parse(erased.erased_at)));

      assert.deepEqual((await haki.listFacts(subject)).facts, []);
      assert.deepEqual((await haki.listEvents(subject)).events, []);
      const exported = await collect(haki.exportSubject(subject)).catch((e) => e);
      assert.ok(exported instanceof NotFound, String(exported));
      assert.equal((await haki.listFacts(other)).facts.length, 1, "another subject is untouched");
      const again = await haki.eraseSubject(subject);
      assert.equal(again.facts + again.events, 0);
    });
  }

  test("subject ids `.`, `..`, `%2E` and others reach their own subject, never another route", async () => {
    const ids = [".", "..", "%2E", unique("a b+c?#&=")];
    for (const subject of ids) {
      await haki.eraseSubject(subject); // a fresh start, should an earlier run have left some
      await haki.writeFacts(subject, [`A fact of the subject ${subject}.`]);
    }
    for (const [i, subject] of ids.entries()) {
      const [header, fact, ...rest] = await collect(haki.exportSubject(subject));
      assert.equal(header.subject_id, subject);
      assert.equal(fact.content, `A fact of the subject ${subject}.`);
      assert.deepEqual(rest, [{ kind: "end", events: 0, facts: 1, conflict_sets: 0 }]);
      const erased = await haki.eraseSubject(subject);
      assert.equal(erased.subject_id, subject);
      assert.equal(erased.facts, 1);
      for (const [j, other] of ids.entries()) {
        assert.equal((await haki.listFacts(other)).facts.length, j > i ? 1 : 0, `${other} after erasing ${subject}`);
      }
    }
  });

  test("deleteFact and deleteEvent erase one memory; it is then not found", async () => {
    const subject = unique("delete");
    const facts = await haki.writeFacts(subject, ["Delete this fact.", "Keep this fact."]);
    const events = await haki.writeEvents(subject, [
      { content: "Delete this event.", occurred_at: "2026-01-02T03:04:05Z" },
      { content: "Keep this event.", occurred_at: "2026-01-03T03:04:05Z" },
    ]);
    const factId = facts.facts[0].fact_id;
    const eventId = events.events[0].event_id;

    const factGone = await haki.deleteFact(factId.toUpperCase());
    assert.equal(factGone.fact_id, factId);
    assert.equal(factGone.subject_id, subject);
    assert.ok(!Number.isNaN(Date.parse(factGone.erased_at)));
    const missingFact = await haki.getFact(factId).catch((e) => e);
    assert.ok(missingFact instanceof NotFound);
    assert.deepEqual(
      (await haki.listFacts(subject)).facts.map((f) => f.fact_id),
      [facts.facts[1].fact_id],
    );

    const eventGone = await haki.deleteEvent(eventId);
    assert.equal(eventGone.event_id, eventId);
    assert.equal(eventGone.subject_id, subject);
    const missingEvent = await haki.getEvent(eventId).catch((e) => e);
    assert.ok(missingEvent instanceof NotFound);
    assert.equal(missingEvent.status, 404);
    assert.deepEqual(
      (await haki.listEvents(subject)).events.map((e) => e.event_id),
      [events.events[1].event_id],
    );
    const twice = await haki.deleteEvent(eventId).catch((e) => e);
    assert.ok(twice instanceof NotFound);
  });

  test("listEvents pages by cursor, iterEvents follows it, getEvent reads one", async () => {
    const subject = unique("events");
    const written = await haki.writeEvents(subject, [
      { content: "First event.", occurred_at: "2026-01-01T00:00:00Z", metadata: { n: 1 } },
      { content: "Second event.", occurred_at: "2026-01-02T00:00:00Z" },
      { content: "Third event.", occurred_at: "2026-01-03T00:00:00Z" },
    ]);
    const ids = written.events.map((e) => e.event_id);
    const page = await haki.listEvents(subject, { limit: 2 });
    assert.deepEqual(
      page.events.map((e) => e.event_id),
      ids.slice(0, 2),
    );
    assert.ok(page.next_cursor);
    const rest = await haki.listEvents(subject, { limit: 2, cursor: page.next_cursor });
    assert.deepEqual(
      rest.events.map((e) => e.event_id),
      ids.slice(2),
    );
    assert.equal(rest.next_cursor ?? null, null);
    const all = await collect(haki.iterEvents(subject, { pageSize: 1 }));
    assert.deepEqual(
      all.map((e) => e.event_id),
      ids,
    );
    const first = await haki.getEvent(ids[0]);
    assert.equal(first.content, "First event.");
    assert.equal(first.subject_id, subject);
    assert.deepEqual(first.metadata, { n: 1 });
    assert.equal(Date.parse(first.occurred_at), Date.parse("2026-01-01T00:00:00Z"));
  });

  test("listSubjects pages the project's subjects with their counts", async () => {
    const subject = unique("listed");
    await haki.writeFacts(subject, ["Listed fact one.", "Listed fact two."]);
    await haki.writeEvents(subject, [{ content: "Listed event.", occurred_at: "2026-01-02T03:04:05Z" }]);
    const seen = [];
    let cursor;
    let pages = 0;
    do {
      const page = await haki.listSubjects({ limit: 3, cursor });
      assert.ok(page.subjects.length <= 3);
      seen.push(...page.subjects);
      cursor = page.next_cursor ?? undefined;
      pages += 1;
    } while (cursor);
    const ids = seen.map((s) => s.subject_id);
    assert.equal(new Set(ids).size, ids.length, "no subject on two pages");
    assert.ok(pages >= 2, `a project with several subjects takes pages (${ids.length} subjects)`);
    const mine = seen.find((s) => s.subject_id === subject);
    assert.ok(mine, "the new subject is listed");
    assert.equal(mine.facts, 2);
    assert.equal(mine.events, 1);
    assert.ok(!Number.isNaN(Date.parse(mine.last_write_at)));
  });

  test("exportSubject streams the header, every event and every fact, then the end line, as JSON objects", async () => {
    for (const subject of [unique("export"), unique("team/export")]) {
      const facts = await haki.writeFacts(subject, [
        { content: "Exported fact.", key: "k1", metadata: { source: "ts" } },
        "Exported, then retracted.",
      ]);
      await haki.retractFact(facts.facts[1].fact_id);
      const events = await haki.writeEvents(subject, [
        { content: "Exported event, caf\u00e9.", occurred_at: "2026-01-02T03:04:05Z" },
      ]);
      const lines = await collect(haki.exportSubject(subject));
      assert.equal(lines.length, 5);
      const [header, ...items] = lines;
      assert.deepEqual(items.pop(), { kind: "end", events: 1, facts: 2, conflict_sets: 0 });
      assert.equal(header.haki_export, 2);
      assert.equal(header.project_id, PROJECT);
      assert.equal(header.subject_id, subject);
      assert.ok(!Number.isNaN(Date.parse(header.exported_at)));
      assert.deepEqual(
        items.map((l) => [l.kind, l.event_id ?? l.fact_id]),
        [
          ["event", events.events[0].event_id],
          ["fact", facts.facts[0].fact_id],
          ["fact", facts.facts[1].fact_id],
        ],
      );
      assert.equal(items[0].content, "Exported event, caf\u00e9.");
      assert.deepEqual(items[1].metadata, { source: "ts" });
      assert.equal(items[1].key, "k1");
      assert.equal(items[2].status, "retracted");
    }
  });

  test("extract without a configured chat model: the typed 503 naming the setting, nothing written", async () => {
    const subject = unique("extract");
    const messages = [{ role: "user", content: "I moved to Lyon last month." }];
    const once = new Haki({ baseUrl: BASE_URL, apiKey: API_KEY, projectId: PROJECT, maxRetries: 0 });
    const err = await once.extract(subject, messages).catch((e) => e);
    assert.ok(err instanceof Unavailable, String(err));
    assert.equal(err.code, "unavailable");
    assert.equal(err.status, 503);
    assert.equal(err.details.setting, "HAKI_EXTRACT_BASE_URL");
    assert.equal(err.details.permanent, true);
    assert.equal(err.retryAfter, null);
    assert.ok(err.message.includes("HAKI_EXTRACT_BASE_URL"), err.message);
    const dry = await once.extract(subject, messages, { write: false }).catch((e) => e);
    assert.ok(dry instanceof Unavailable);
    assert.deepEqual((await haki.listEvents(subject)).events, []);
    assert.deepEqual((await haki.listFacts(subject)).facts, []);

    // The default client does not retry it: the server marks it permanent and sends no Retry-After.
    const proxy = await scripted(() => "proxy");
    try {
      const retrying = new Haki({ baseUrl: proxy.url, apiKey: API_KEY, projectId: PROJECT, backoffMs: 1 });
      const again = await retrying.extract(subject, messages).catch((e) => e);
      assert.ok(again instanceof Unavailable);
      assert.equal(proxy.seen.length, 1, "one attempt, no retry");
    } finally {
      await proxy.close();
    }
  });

  test("webhooks: create, list, deliveries and delete; a loopback URL is refused", async () => {
    const refused = await haki.createWebhook("http://127.0.0.1:9/hook", ["fact.retracted"]).catch((e) => e);
    assert.ok(refused instanceof HakiError, String(refused));
    assert.equal(refused.code, "url_refused");
    assert.equal(refused.status, 422);
    assert.equal(refused.field, "url");

    // A public address, resolved without DNS; no test triggers its one event kind, so nothing is sent.
    const url = "http://1.1.1.1/haki-typescript-sdk-test";
    const created = await haki.createWebhook(url, ["extraction.completed"], { includeContent: true });
    assert.match(created.secret, /^whsec_/);
    assert.equal(created.project_id, PROJECT);
    assert.deepEqual([created.url, created.events, created.include_content], [url, ["extraction.completed"], true]);
    const listed = (await haki.listWebhooks()).webhooks.find((w) => w.webhook_id === created.webhook_id);
    assert.ok(listed, "the new webhook is listed");
    assert.equal(listed.secret, undefined, "never the secret again");
    assert.deepEqual([listed.pending, listed.delivered, listed.dead, listed.last_status], [0, 0, 0, null]);
    assert.deepEqual(await haki.listWebhookDeliveries(created.webhook_id), { deliveries: [] });
    assert.deepEqual(await haki.listWebhookDeliveries(created.webhook_id, { status: "dead", limit: 5 }), { deliveries: [] });

    assert.deepEqual(await haki.deleteWebhook(created.webhook_id.toUpperCase()), { webhook_id: created.webhook_id, deleted: true });
    const ids = (await haki.listWebhooks()).webhooks.map((w) => w.webhook_id);
    assert.ok(!ids.includes(created.webhook_id));
    assert.ok((await haki.deleteWebhook(created.webhook_id).catch((e) => e)) instanceof NotFound);
    assert.ok((await haki.listWebhookDeliveries(created.webhook_id).catch((e) => e)) instanceof NotFound);
  });
});
