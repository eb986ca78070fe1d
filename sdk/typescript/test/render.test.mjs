// render() must give byte-identical output to the Python SDK's render() for the same packet.
//
// 1. Golden packets rendered by Python (test/render_golden.json, written by make_render_golden.py
//    and kept current by tests/test_sdk_typescript.py): every place where Python and JavaScript
//    differ (whitespace, case folding, datetimes, Unicode digits).
// 2. Random packets built here from the same tricky pieces, rendered by Python in one subprocess
//    (HAKI_PYTHON: a Python with haki_client installed; scripts/test_typescript.sh sets it).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { hidden, isEmpty, render } from "../dist/index.js";

const golden = JSON.parse(readFileSync(new URL("./render_golden.json", import.meta.url), "utf8"));

test("golden packets render exactly as in Python", () => {
  assert.ok(golden.length >= 20);
  for (const { name, packet, state_warnings: stateWarnings, expected } of golden) {
    if (expected.error !== undefined) {
      assert.throws(() => render(packet, { stateWarnings }), `${name}: Python raised ${expected.error}`);
    } else {
      assert.equal(render(packet, { stateWarnings }), expected.text, name);
    }
  }
});

test("hidden() and isEmpty() read the packet as Python's properties do", () => {
  const byName = Object.fromEntries(golden.map((c) => [c.name, c.packet]));
  assert.deepEqual(hidden(byName["held back, state_warnings"]), { open_conflict: 2, volatility_expired: 1 });
  assert.deepEqual(hidden(byName["unicode digits and letters in counts"]), {
    open_conflict: 3,
    "conflit_ouvert_é": 12,
    "一_reason": 7,
    x: 5,
  });
  assert.deepEqual(hidden(byName["readme packet"]), {});
  assert.equal(isEmpty(byName["empty packet"]), true);
  assert.equal(isEmpty(byName["readme packet"]), false);
});

// --- random packets against the Python SDK -----------------------------------------------------

function rng(seed) {
  // mulberry32: reproducible from the printed seed
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES = [
  "Maya", " ", "  ", "\n", "\r\n", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680",
  "\u2003", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff",
  "<", ">", "/", "haki_memory", "HAKI_MEMORY", "ha\u212ai_memory", "hak\u0131_memory", "hak\u0130_memory",
  "<haki_memory>", "</haki_memory>", "< /haki_memory >", "\uff1c", "é", "e\u0301", "\u{1F600}", "一",
  "works at", "Acme", "7", "\u0663", "\u{1D7CF}", "fact(s)", "hidden", ":", "_", "-",
];

function text(r, max = 8) {
  let s = "";
  const n = Math.floor(r() * max);
  for (let i = 0; i < n; i += 1) s += PIECES[Math.floor(r() * PIECES.length)];
  return s;
}

const pad = (n, w = 2) => String(n).padStart(w, "0");

function datetime(r) {
  const year = r() < 0.05 ? 100 + Math.floor(r() * 900) : 1970 + Math.floor(r() * 80);
  const month = 1 + Math.floor(r() * 12);
  const day = 1 + Math.floor(r() * 28);
  const midnight = r() < 0.3;
  const hour = midnight ? 0 : Math.floor(r() * 24);
  const minute = midnight ? 0 : Math.floor(r() * 60);
  const second = midnight ? 0 : Math.floor(r() * 60);
  let fraction = "";
  if (r() < 0.4) {
    const digits = 1 + Math.floor(r() * 9);
    for (let i = 0; i < digits; i += 1) fraction += String(r() < 0.5 ? 9 : Math.floor(r() * 10));
    fraction = `.${fraction}`;
  }
  const sep = ["T", "t", " "][Math.floor(r() * 3)];
  const zones = ["Z", "z", "+00:00", "+01:00", "-05:00", "+05:30", "+0530", "-0930", "+14:00", "-12:00", ""];
  const zone = zones[Math.floor(r() * zones.length)];
  return `${pad(year, 4)}-${pad(month)}-${pad(day)}${sep}${pad(hour)}:${pad(minute)}:${pad(second)}${fraction}${zone}`;
}

function warning(r) {
  if (r() < 0.6) {
    const reasons = ["open_conflict", "volatility_expired", "x", "é_1", "a-b", ""];
    const counts = ["2", "0", "12", "\u0663", "\u{1D7CF}\u{1D7D0}", "\u00b2", "99999999999999999999"];
    const tails = [" pending conflict resolution", "", "ly", "_", "\u0301", "."];
    const pick = (xs) => xs[Math.floor(r() * xs.length)];
    return `${pick(reasons)}: ${pick(counts)} fact(s) hidden${pick(tails)}`;
  }
  return text(r);
}

function randomPacket(r, i) {
  const id = (n) => `01a23046-59f4-7389-b3b9-${pad(n, 12)}`;
  const facts = [];
  const nf = r() < 0.3 ? 0 : Math.floor(r() * 4);
  for (let k = 0; k < nf; k += 1) {
    facts.push({
      fact_id: id(k),
      content: text(r),
      score: r(),
      tokens: 1 + Math.floor(r() * 20),
      reason_code: "packed",
      recorded_from: "2026-11-20T08:30:00Z",
      valid_from: r() < 0.5 ? datetime(r) : null,
      valid_to: r() < 0.4 ? datetime(r) : null,
      source_event_id: null,
    });
  }
  const episodes = [];
  const ne = r() < 0.4 ? 0 : Math.floor(r() * 3);
  for (let k = 0; k < ne; k += 1) {
    episodes.push({ event_id: id(100 + k), content: text(r), occurred_at: datetime(r), score: r(), tokens: 2 });
  }
  const warnings = [];
  const nw = Math.floor(r() * 3);
  for (let k = 0; k < nw; k += 1) warnings.push(warning(r));
  return {
    packet: {
      trace_id: id(9000 + i),
      profile: "unified",
      status: warnings.length ? "degraded" : "ok",
      empty_reason: null,
      budget_tokens: 900,
      used_tokens: 0,
      facts,
      episodes,
      warnings,
    },
    state_warnings: r() < 0.5,
    fact_ids: r() < 0.5,
  };
}

function pythonRender(cases) {
  const script = fileURLToPath(new URL("./python_render.py", import.meta.url));
  const done = spawnSync(process.env.HAKI_PYTHON, [script], {
    input: JSON.stringify(cases),
    encoding: "utf8",
    env: { ...process.env, PYTHONIOENCODING: "utf-8", PYTHONUTF8: "1" },
    maxBuffer: 64 * 1024 * 1024,
  });
  assert.equal(done.status, 0, done.stderr);
  return JSON.parse(done.stdout);
}

test(
  "random packets render exactly as in Python",
  { skip: process.env.HAKI_PYTHON ? false : "HAKI_PYTHON is not set (scripts/test_typescript.sh sets it)" },
  () => {
    const seed = Number(process.env.HAKI_RENDER_SEED ?? Date.now() % 2 ** 31);
    const r = rng(seed);
    const cases = Array.from({ length: 400 }, (_, i) => randomPacket(r, i));
    const expected = pythonRender(cases);
    let compared = 0;
    for (const [i, { packet, state_warnings: stateWarnings, fact_ids: factIds }] of cases.entries()) {
      const want = expected[i];
      const where = `seed ${seed}, packet ${i}: ${JSON.stringify(packet)}`;
      if (want.error !== undefined) {
        assert.throws(() => render(packet, { stateWarnings, factIds }), where);
      } else {
        assert.equal(render(packet, { stateWarnings, factIds }), want.text, where);
        compared += 1;
      }
    }
    assert.ok(compared > 300, `only ${compared} of 400 packets were renderable by Python (seed ${seed})`);
  },
);

test(
  "factIds ends each fact's line with its id, as Python's fact_ids=True does",
  { skip: process.env.HAKI_PYTHON ? false : "HAKI_PYTHON is not set (scripts/test_typescript.sh sets it)" },
  () => {
    const renderable = golden.filter((c) => c.expected.error === undefined);
    const expected = pythonRender(renderable.map((c) => ({ ...c, fact_ids: true })));
    let withIds = 0;
    for (const [i, { name, packet, state_warnings: stateWarnings }] of renderable.entries()) {
      const text = render(packet, { stateWarnings, factIds: true });
      assert.equal(text, expected[i].text, name);
      for (const fact of packet.facts) {
        if (text.includes(`[fact_id: ${fact.fact_id}]`)) withIds += 1;
      }
    }
    assert.ok(withIds > 5, `only ${withIds} fact lines carried their id`);
  },
);
