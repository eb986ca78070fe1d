// Generates src/schema.ts (types only) from openapi.json, the OpenAPI document Haki serves at
// /docs/openapi.json, with openapi-typescript. `--check` regenerates in memory and fails when the
// checked-in file differs (npm test runs it), naming the command that brings it up to date.
//
//   just ts-types        # from the repository root: dumps openapi.json, then runs this
//   npm run generate     # from sdk/typescript: openapi.json -> src/schema.ts only
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const root = new URL("../", import.meta.url);
const specPath = fileURLToPath(new URL("openapi.json", root));
const outPath = fileURLToPath(new URL("src/schema.ts", root));
const REGENERATE = "just ts-types   (or: .venv/bin/python scripts/dump_openapi.py > sdk/typescript/openapi.json && cd sdk/typescript && npm run generate)";

export async function generate(spec) {
  const ast = await openapiTS(spec, { alphabetize: false, exportType: false, defaultNonNullable: false });
  return COMMENT_HEADER + astToString(ast);
}

const spec = JSON.parse(readFileSync(specPath, "utf8"));
const generated = await generate(spec);
if (process.argv.includes("--check")) {
  let current = "";
  try {
    current = readFileSync(outPath, "utf8");
  } catch {
    // a missing file is stale too
  }
  if (current !== generated) {
    console.error(`sdk/typescript/src/schema.ts is stale: it was not generated from sdk/typescript/openapi.json.\nRegenerate it with: ${REGENERATE}`);
    process.exit(1);
  }
  console.log("src/schema.ts matches openapi.json");
} else {
  writeFileSync(outPath, generated);
  console.log(`wrote ${outPath}`);
}
