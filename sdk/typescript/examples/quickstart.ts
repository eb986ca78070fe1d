// The README's TypeScript quick start. test/package.test.mjs compiles it against the packed
// package (npm pack) and runs it against a real haki serve. HAKI_BASE_URL and HAKI_API_KEY come
// from the environment (a key of project "demo": `.venv/bin/haki keys create demo`).
import { Haki, HakiError, render, type ContextPacket } from "haki-client";

const haki = new Haki({ projectId: "demo" });

await haki.writeFacts("maya", [
  { content: "Maya works as a nurse at Lyon Sud hospital.", key: "employer" },
  "Maya is allergic to peanuts.",
  "Maya prefers to be contacted by email, never by phone.",
]);
await haki.writeEvents("maya", [
  { content: "Maya asked to move her appointment to Friday morning.", occurred_at: "2026-11-20T09:30:00+01:00" },
]);

const packet: ContextPacket = await haki.context("maya", "Can I call Maya to confirm her appointment?", {
  budgetTokens: 900,
});
console.log(render(packet)); // the block to put in the prompt
console.log(`trace ${packet.trace_id}: ${packet.used_tokens}/${packet.budget_tokens} tokens`);

try {
  await haki.context("maya", "anything", { budgetTokens: 0 });
} catch (err) {
  if (err instanceof HakiError) console.log(`${err.code} (HTTP ${err.status}): ${err.message}`);
}
