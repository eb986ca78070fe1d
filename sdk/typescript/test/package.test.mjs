// What `npm pack` produces is a usable package: ESM and CommonJS (dual build), types included,
// no runtime dependency.
// A consumer project outside this one installs the tarball, type-checks the README's quick start
// (examples/quickstart.ts) and a file of deliberate type errors under `strict`, then runs the
// quick start against the real server when there is one (scripts/test_typescript.sh).
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const SDK = fileURLToPath(new URL("../", import.meta.url));
const TSC = join(SDK, "node_modules", "typescript", "bin", "tsc");

function packInto(dir) {
  const out = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: SDK, encoding: "utf8" });
  const tarball = out.trim().split("\n").pop();
  const consumer = join(dir, "consumer");
  mkdirSync(join(consumer, "node_modules"), { recursive: true });
  execFileSync("tar", ["-xzf", join(dir, tarball), "-C", join(consumer, "node_modules")]);
  renameSync(join(consumer, "node_modules", "package"), join(consumer, "node_modules", "haki-client"));
  return consumer;
}

test("npm pack gives an ESM package with types and no runtime dependency, usable from TypeScript", () => {
  const dir = mkdtempSync(join(tmpdir(), "haki-ts-pack-"));
  const consumer = packInto(dir);
  const installed = join(consumer, "node_modules", "haki-client");
  const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  assert.equal(manifest.type, "module");
  assert.equal(manifest.dependencies, undefined, "zero runtime dependencies");
  assert.equal(manifest.exports["."].import.types, "./dist/index.d.ts");
  assert.equal(manifest.exports["."].require.types, "./dist/cjs/index.d.ts");
  const shipped = readdirSync(join(installed, "dist"));
  for (const file of ["index.js", "index.d.ts", "client.js", "render.js", "schema.d.ts"]) {
    assert.ok(shipped.includes(file), `${file} is shipped`);
  }
  const cjs = readdirSync(join(installed, "dist", "cjs"));
  for (const file of ["index.js", "index.d.ts", "client.js", "render.js", "package.json"]) {
    assert.ok(cjs.includes(file), `cjs/${file} is shipped`);
  }
  assert.ok(!shipped.some((f) => f.endsWith(".ts") && !f.endsWith(".d.ts")), "no TypeScript sources shipped");

  writeFileSync(join(consumer, "package.json"), JSON.stringify({ type: "module", private: true }));
  writeFileSync(
    join(consumer, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        noEmitOnError: true,
        skipLibCheck: false,
        types: [],
        lib: ["ES2022", "DOM"],
      },
      include: ["*.ts"],
    }),
  );
  copyFileSync(join(SDK, "examples", "quickstart.ts"), join(consumer, "quickstart.ts"));
  // Every line marked @ts-expect-error must be an error: tsc fails on one that is not.
  writeFileSync(
    join(consumer, "types_are_live.ts"),
    `import { Haki, render, type ContextPacket, type Fact, type FactIn } from "haki-client";
const haki = new Haki({ projectId: "p" });
export async function check(packet: ContextPacket, fact: Fact): Promise<string> {
  // @ts-expect-error budgetTokens is a number
  await haki.context("s", "q", { budgetTokens: "900" });
  // @ts-expect-error the profiles are "unified" and "facts_first"
  await haki.context("s", "q", { profile: "newest" });
  // @ts-expect-error a fact needs its content
  const bad: FactIn = { key: "employer" };
  // @ts-expect-error no such field in the contract
  packet.facts[0]?.no_such_field;
  const status: "ok" | "degraded" = packet.status;
  const id: string = fact.fact_id;
  return render(packet, { stateWarnings: true }) + status + id + String(bad);
}
`,
  );
  const compiled = spawnSync(process.execPath, [TSC, "-p", consumer], { encoding: "utf8" });
  assert.equal(compiled.status, 0, compiled.stdout + compiled.stderr);

  const live = process.env.HAKI_BASE_URL && process.env.HAKI_API_KEY && process.env.HAKI_PROJECT_ID === "demo";
  if (!live) return;
  const run = spawnSync(process.execPath, [join(consumer, "quickstart.js")], { encoding: "utf8", env: process.env });
  assert.equal(run.status, 0, run.stderr);
  const out = run.stdout;
  assert.ok(out.startsWith("<haki_memory>\nFacts:\n"), out);
  assert.ok(out.includes("- Maya works as a nurse at Lyon Sud hospital.\n"), out);
  assert.ok(out.includes("Episodes:\n- [2026-11-20 08:30 UTC] Maya asked to move her appointment to Friday morning.\n"), out);
  assert.match(out, /\ntrace [0-9a-f-]{36}: \d+\/900 tokens\n/);
  assert.ok(out.includes("budget_exceeded (HTTP 400): "), out);
  if (process.env.HAKI_QUICKSTART_OUTPUT) writeFileSync(process.env.HAKI_QUICKSTART_OUTPUT, out);
});

test("the packed package works from require() and from import, with one behaviour", () => {
  const dir = mkdtempSync(join(tmpdir(), "haki-ts-cjs-"));
  const consumer = packInto(dir);
  // A CommonJS project (no "type"): require() gets the CommonJS build.
  writeFileSync(join(consumer, "package.json"), JSON.stringify({ private: true }));
  const program = (load) => `${load}
const packet = {
  trace_id: "0190f5b2-7c4e-7a39-9f1e-3c2b1a0d4e5f", profile: "unified", status: "ok", warnings: [],
  empty_reason: null, budget_tokens: 900, used_tokens: 3,
  facts: [{ fact_id: "0190f5b2-7c4e-7a39-9f1e-000000000001", content: "Maya is a nurse.", valid_from: null, valid_to: null }],
  episodes: [],
};
let field = null;
try { haki.normaliseUuid("garbage", "trace_id"); } catch (e) { field = e instanceof haki.ValidationError ? e.field : "untyped"; }
console.log(JSON.stringify({ haki: typeof haki.Haki, text: haki.render(packet, { factIds: true }), field }));
`;
  writeFileSync(join(consumer, "use.cjs"), program('const haki = require("haki-client");'));
  writeFileSync(join(consumer, "use.mjs"), program('import * as haki from "haki-client";'));
  const outputs = ["use.cjs", "use.mjs"].map((file) => {
    const run = spawnSync(process.execPath, [join(consumer, file)], { cwd: consumer, encoding: "utf8" });
    assert.equal(run.status, 0, `${file}: ${run.stderr}`);
    return JSON.parse(run.stdout);
  });
  assert.deepEqual(outputs[0], outputs[1]);
  assert.deepEqual(outputs[0], {
    haki: "function",
    text: "<haki_memory>\nFacts:\n- Maya is a nurse. [fact_id: 0190f5b2-7c4e-7a39-9f1e-000000000001]\n</haki_memory>",
    field: "trace_id",
  });
  // TypeScript resolves the CommonJS entry's types from a .cts file, under strict.
  writeFileSync(
    join(consumer, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        types: [],
        lib: ["ES2022", "DOM"],
      },
      include: ["*.cts"],
    }),
  );
  writeFileSync(
    join(consumer, "typed.cts"),
    `import haki = require("haki-client");
const client = new haki.Haki({ baseUrl: "http://127.0.0.1:8000" });
export const pending: Promise<haki.ContextPacket> = client.context("s", "q");
// @ts-expect-error factIds is a boolean
haki.render({ facts: [], episodes: [] }, { factIds: "yes" });
`,
  );
  const compiled = spawnSync(process.execPath, [TSC, "-p", consumer], { encoding: "utf8" });
  assert.equal(compiled.status, 0, compiled.stdout + compiled.stderr);
});
