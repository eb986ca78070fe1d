/**
 * `render(packet)`: a ContextPacket as one compact `<haki_memory>` block for a prompt.
 *
 * Byte for byte the output of the Python SDK's `render()` (sdk/python/haki_client/render.py) for
 * the same packet, which is why this file spells out what Python's `re` and `datetime` do where
 * JavaScript's differ: which characters are whitespace (`\s`, `str.strip`), which letters
 * match case-insensitively (the Kelvin sign is a `k`), how msgspec rounds sub-microsecond
 * fractions, and that `%Y` does not pad years below 1000. test/render.test.mjs checks it against
 * packets rendered by Python.
 */

export const OPEN_TAG = "<haki_memory>";
export const CLOSE_TAG = "</haki_memory>";
// The first line of a block that serves nothing but states its warnings (stateWarnings: true).
const HELD_BACK = (n: string): string =>
  `Nothing served: ${n} fact(s) about this subject are known but held back (see the warnings).`;
const NOTHING_SERVED = "Nothing served (see the warnings).";

// Python's `\s` (and `str.strip()`) on str: exactly these 29 code points. JavaScript's `\s`
// differs: it has U+FEFF and lacks U+001C..U+001F and U+0085.
const WS = "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
// `<\s*/?\s*haki_memory\s*>` with re.IGNORECASE: Python also folds U+212A (Kelvin sign) to `k`
// and U+0130 / U+0131 (dotted capital, dotless small i) to `i`.
const TAG = new RegExp(
  `<[${WS}]*/?[${WS}]*[hH][aA][kK\\u212a][iI\\u0130\\u0131]_[mM][eE][mM][oO][rR][yY][${WS}]*>`,
  "g",
);
const SPACE = new RegExp(`[${WS}]+`, "g");
const EDGES = new RegExp(`^[${WS}]+|[${WS}]+$`, "g");
// A warning that counts held-back facts: "open_conflict: 2 fact(s) hidden pending conflict
// resolution". Python's `\w` is [\p{L}\p{N}_] and its `\d` is \p{Nd}, both Unicode-wide.
const HIDDEN = /^(?<reason>[\p{L}\p{N}_]+): (?<n>\p{Nd}+) fact\(s\) hidden(?![\p{L}\p{N}_])/u;
const DECIMAL = /\p{Nd}/u;
// Python refuses int() of a longer digit string (sys.int_info.default_max_str_digits).
const MAX_INT_DIGITS = 4300;

/** The fields of a packet that `render` reads: any ContextPacket (from this client or as JSON). */
export interface RenderablePacket {
  readonly facts: ReadonlyArray<{
    readonly fact_id?: string;
    readonly content: string;
    readonly valid_from?: string | null;
    readonly valid_to?: string | null;
  }>;
  readonly episodes: ReadonlyArray<{ readonly content: string; readonly occurred_at: string }>;
  readonly warnings?: ReadonlyArray<string> | null;
}

export interface RenderOptions {
  /**
   * Keep the block when the packet serves nothing but has warnings (every fact hidden by an
   * open conflict, say): it then says that memory was held back and why. Off by default.
   */
  stateWarnings?: boolean;
  /**
   * End each fact's line with `[fact_id: <id>]`: the id to pass as `supersedes` when a new fact
   * replaces that one. Off by default.
   */
  factIds?: boolean;
}

/** One line per item: a newline inside content would read as the start of another item. */
function clean(text: string): string {
  // Memory content is untrusted text: a copy of the block's own tags inside it could close the
  // block early and make what follows read as instructions outside the memory.
  return text.replace(TAG, "[haki_memory tag removed]").replace(SPACE, " ").replace(EDGES, "");
}

// msgspec's RFC 3339 grammar: `T`, `t` or a space; `Z`, `z`, `+hh:mm`, `+hhmm` or nothing (naive).
const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):?(\d{2}))?$/;

const pad2 = (n: number): string => String(n).padStart(2, "0");

/** A date alone when the time is midnight UTC (the usual case for business dates). */
function when(value: string): string {
  const m = RFC3339.exec(value);
  if (m === null) {
    throw new TypeError(`not an RFC 3339 datetime: ${JSON.stringify(value)}`);
  }
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number, number, number, number, number, number,
  ];
  const probe = new Date(0);
  probe.setUTCFullYear(year, month - 1, day);
  if (
    year < 1 || month < 1 || month > 12 || probe.getUTCDate() !== day ||
    hour > 23 || minute > 59 || second > 59
  ) {
    throw new TypeError(`not a valid datetime: ${JSON.stringify(value)}`);
  }
  // msgspec keeps microseconds and rounds on the seventh digit (half up).
  const fraction = m[7] ?? "";
  let micro = Number(fraction.slice(0, 6).padEnd(6, "0"));
  if (fraction.length > 6 && fraction.charCodeAt(6) >= 0x35) micro += 1;
  let shift = 0;
  if (micro === 1_000_000) {
    micro = 0;
    shift += 1;
  }
  if (m[9] !== undefined) {
    const offsetHours = Number(m[10]);
    const offsetMinutes = Number(m[11]);
    if (offsetHours > 23 || offsetMinutes > 59) {
      throw new TypeError(`not a valid UTC offset: ${JSON.stringify(value)}`);
    }
    const offset = (offsetHours * 60 + offsetMinutes) * 60;
    shift -= m[9] === "+" ? offset : -offset; // to UTC; a naive time is shown as it is
  }
  const utc = new Date(0);
  utc.setUTCFullYear(year, month - 1, day);
  utc.setUTCHours(hour, minute, second + shift, 0);
  const y = utc.getUTCFullYear();
  if (y < 1 || y > 9999) {
    throw new RangeError(`datetime out of range: ${JSON.stringify(value)}`);
  }
  // strftime("%Y") on glibc does not pad a year below 1000: String(y), not padStart(4).
  const date = `${y}-${pad2(utc.getUTCMonth() + 1)}-${pad2(utc.getUTCDate())}`;
  const h = utc.getUTCHours();
  const min = utc.getUTCMinutes();
  if (h === 0 && min === 0 && utc.getUTCSeconds() === 0 && micro === 0) return date;
  return `${date} ${pad2(h)}:${pad2(min)} UTC`;
}

/** The value of a decimal digit (any script): Unicode encodes each set of ten in order. */
function digitValue(cp: number): number {
  let start = cp;
  while (start > 0 && DECIMAL.test(String.fromCodePoint(start - 1))) start -= 1;
  return (cp - start) % 10;
}

function parseDigits(digits: string): bigint {
  const chars = [...digits];
  if (chars.length > MAX_INT_DIGITS) {
    throw new RangeError(`a count of ${chars.length} digits exceeds Python's int() limit`);
  }
  let n = 0n;
  for (const ch of chars) n = n * 10n + BigInt(digitValue(ch.codePointAt(0)!));
  return n;
}

function hiddenCounts(warnings: ReadonlyArray<string>): Map<string, bigint> {
  const counts = new Map<string, bigint>();
  for (const warning of warnings) {
    const m = HIDDEN.exec(warning);
    if (m?.groups !== undefined) {
      const reason = m.groups["reason"]!;
      counts.set(reason, (counts.get(reason) ?? 0n) + parseDigits(m.groups["n"]!));
    }
  }
  return counts;
}

/** Nothing served: no fact and no episode. */
export function isEmpty(packet: RenderablePacket): boolean {
  return packet.facts.length === 0 && packet.episodes.length === 0;
}

/**
 * Facts held back, by reason, as the warnings count them: `{ open_conflict: 2 }` when two facts
 * wait for a conflict to be resolved, `{}` when nothing was held back. With `isEmpty`, it tells
 * "nothing known" (`{}`) from "known but held back".
 */
export function hidden(packet: RenderablePacket): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [reason, n] of hiddenCounts(packet.warnings ?? [])) out[reason] = Number(n);
  return out;
}

function factLine(fact: RenderablePacket["facts"][number], factIds: boolean): string {
  let line = `- ${clean(fact.content)}`;
  const from = fact.valid_from ?? null;
  const to = fact.valid_to ?? null;
  if (from !== null && to !== null) line += ` (valid ${when(from)} to ${when(to)})`;
  else if (from !== null) line += ` (since ${when(from)})`;
  else if (to !== null) line += ` (until ${when(to)})`;
  if (factIds) line += ` [fact_id: ${(fact.fact_id ?? "").toLowerCase()}]`;
  return line;
}

/**
 * The packet as a block to put in a prompt; the empty string when it serves nothing.
 *
 * Facts come first, then the dated episodes, each in pack order (most relevant first), then the
 * warnings. An empty packet renders as nothing at all: a "no memory" block would itself distract
 * the model. With `stateWarnings: true`, a packet that serves nothing but has warnings renders
 * as a block saying that memory was held back and why.
 */
export function render(packet: RenderablePacket, options: RenderOptions = {}): string {
  const warnings = packet.warnings ?? [];
  if (isEmpty(packet)) {
    if (!(options.stateWarnings && warnings.length > 0)) return "";
    let held = 0n;
    for (const n of hiddenCounts(warnings).values()) held += n;
    const head = held > 0n ? HELD_BACK(String(held)) : NOTHING_SERVED;
    return [OPEN_TAG, head, "Warnings:", ...warnings.map((w) => `- ${clean(w)}`), CLOSE_TAG].join("\n");
  }
  const lines = [OPEN_TAG];
  if (packet.facts.length > 0) {
    lines.push("Facts:");
    for (const fact of packet.facts) lines.push(factLine(fact, options.factIds === true));
  }
  if (packet.episodes.length > 0) {
    lines.push("Episodes:");
    for (const episode of packet.episodes) lines.push(`- [${when(episode.occurred_at)}] ${clean(episode.content)}`);
  }
  if (warnings.length > 0) {
    lines.push("Warnings:");
    for (const warning of warnings) lines.push(`- ${clean(warning)}`);
  }
  lines.push(CLOSE_TAG);
  return lines.join("\n");
}
