/**
 * Byte-preserving edits of a JSON object's top-level members.
 *
 * Passthrough forwards the client's body unchanged but for `model` (and `models` removed, and on
 * Chat streams `stream_options` set): re-serialising with JSON.stringify would reformat the body,
 * round big integers and rewrite `1.0` as `1`. Instead we locate the top-level members in the
 * original text and splice only the spans we change. The text must already be valid JSON whose
 * root is an object (the caller has parsed it once to validate and read fields).
 */

import type { LargeBody, Member } from '../json/parse.js';
import { OutgoingBody } from '../json/text.js';

function isWs(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function skipWs(s: string, i: number): number {
  while (i < s.length && isWs(s.charCodeAt(i))) i++;
  return i;
}

function skipString(s: string, i: number): number {
  // s[i] is the opening quote. indexOf finds the candidates at native speed (a 64 MiB base64 image
  // is one string); a quote is the closing one when an even number of backslashes precede it.
  let from = i + 1;
  for (;;) {
    const q = s.indexOf('"', from);
    if (q < 0) throw new Error('unterminated string');
    let k = q - 1;
    while (k > i && s.charCodeAt(k) === 0x5c /* \ */) k--;
    if ((q - 1 - k) % 2 === 0) return q + 1;
    from = q + 1;
  }
}

function skipValue(s: string, i: number): number {
  const c = s.charCodeAt(i);
  if (c === 0x22) return skipString(s, i);
  if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
    let depth = 0;
    while (i < s.length) {
      const d = s.charCodeAt(i);
      if (d === 0x22) {
        i = skipString(s, i);
        continue;
      }
      if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    throw new Error('unterminated container');
  }
  // number, true, false, null
  while (i < s.length) {
    const d = s.charCodeAt(i);
    if (d === 0x2c || d === 0x7d || d === 0x5d || isWs(d)) break;
    i++;
  }
  return i;
}

/** The top-level members of the object in `s`, with their spans, in source order. */
function members(s: string): { open: number; close: number; list: Member[] } {
  let i = skipWs(s, 0);
  if (s.charCodeAt(i) !== 0x7b) throw new Error('not a JSON object');
  const open = i;
  i++;
  const list: Member[] = [];
  for (;;) {
    i = skipWs(s, i);
    if (s.charCodeAt(i) === 0x7d) return { open, close: i, list };
    const start = i;
    const keyEnd = skipString(s, i);
    // A key without a backslash is its text (the body was parsed already: no raw control characters).
    let escaped = false;
    for (let k = start + 1; k < keyEnd - 1 && !escaped; k++) escaped = s.charCodeAt(k) === 0x5c;
    const key = escaped ? (JSON.parse(s.slice(start, keyEnd)) as string) : s.slice(start + 1, keyEnd - 1);
    i = skipWs(s, keyEnd);
    i++; // colon
    const valueStart = skipWs(s, i);
    const valueEnd = skipValue(s, valueStart);
    list.push({ key, start, valueStart, valueEnd });
    i = skipWs(s, valueEnd);
    if (s.charCodeAt(i) === 0x2c) i++;
  }
}

export interface SpliceOps {
  /** Replace the value of each member with this key (every duplicate), or add it when absent. */
  set?: Record<string, unknown>;
  /** Remove these members (every duplicate). */
  remove?: string[];
}

/** Applies `ops` to the JSON object text `s`, leaving every other byte as it was. */
export function spliceJson(s: string, ops: SpliceOps): string {
  let out = '';
  for (const x of spliceRanges(members(s), ops)) out += typeof x === 'string' ? x : s.slice(x[0], x[1]);
  return out;
}

/**
 * The same splice for a large body (core/json), from the members its parser recorded: the spans
 * kept are the text's own pieces, written upstream as they are (nothing copied whole).
 */
export function spliceLarge(large: LargeBody, ops: SpliceOps): OutgoingBody {
  const out = new OutgoingBody();
  for (const x of spliceRanges(large.top, ops)) {
    if (typeof x === 'string') out.push(x);
    else large.text.partsOf(x[0], x[1], out);
  }
  return out;
}

/** The spliced text as new strings and [start, end) spans of the original, in order. */
function spliceRanges(m: { close: number; list: Member[] }, ops: SpliceOps): Array<string | [number, number]> {
  const { close, list } = m;
  const set = ops.set ?? {};
  const remove = new Set(ops.remove ?? []);
  const out: Array<string | [number, number]> = [];
  if (list.length === 0) {
    const adds = Object.keys(set);
    out.push([0, close]);
    if (adds.length > 0) out.push(adds.map((k) => `${JSON.stringify(k)}:${JSON.stringify(set[k])}`).join(','));
    out.push([close, Infinity]);
    return out;
  }
  const seen = new Set<string>();
  const member = (m: Member) => {
    if (!Object.prototype.hasOwnProperty.call(set, m.key)) return out.push([m.start, m.valueEnd]);
    seen.add(m.key);
    out.push([m.start, m.valueStart], JSON.stringify(set[m.key]));
  };
  // head + kept members, each followed by the separator that followed it in the source
  // (so the bytes between two originally adjacent kept members are unchanged) + tail.
  out.push([0, list[0].start]);
  let prev: number | undefined;
  for (let i = 0; i < list.length; i++) {
    const m = list[i];
    if (remove.has(m.key)) continue;
    if (prev !== undefined) out.push([list[prev].valueEnd, list[prev + 1].start]);
    member(m);
    prev = i;
  }
  const additions = Object.keys(set).filter((k) => !seen.has(k));
  if (additions.length > 0) {
    const text = additions.map((k) => `${JSON.stringify(k)}:${JSON.stringify(set[k])}`).join(',');
    out.push(prev === undefined ? text : ',' + text);
  }
  // The tail starts after the last member's value: it may hold a trailing comma-free gap only.
  out.push([list[list.length - 1].valueEnd, Infinity]);
  return out;
}
