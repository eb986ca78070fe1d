// The CommonJS build (tsconfig.cjs.json, dist/cjs) is read as CommonJS inside this "type":
// "module" package only under a package.json of its own that says so.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), `${JSON.stringify({ type: "commonjs" })}\n`);
