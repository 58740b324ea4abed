/**
 * Reading one member of a JSON text without parsing the rest: for the usage of an upstream's
 * answer (a stream's usage chunk, a non-streaming body), which would otherwise have `JSON.parse`
 * build the whole answer (ids, model, choices, message text) to read it. In the gateway under
 * load, that parse cost about 7 µs per streaming request (the Chat usage chunk) and 9 µs per
 * non-streaming one (the body): V8 interns every key and walks the transitions of the heap's
 * busiest map for every property, three times what the same parse costs in a loop of its own. A
 * scan of the text in JavaScript is no cheaper (a few ns a character here), so nothing below reads
 * the text character by character.
 */

/**
 * From a `}` to the end of the text: plain members (a key and a string, number or literal, no
 * escapes; none named usage, which would be the one `JSON.parse` keeps), then the `}` that closes
 * the root object. Sticky: tried at one position.
 */
const TAIL =
  /\}(?:[ \t\n\r]*,[ \t\n\r]*"(?!usage")[^"\\\x00-\x1f]*"[ \t\n\r]*:[ \t\n\r]*(?:"[^"\\\x00-\x1f]*"|[-+.0-9eE]+|true|false|null))*[ \t\n\r]*\}[ \t\n\r]*$/y;
/** The `}` tried as the end of the member's value: a plain member's string may hold one too. */
const TRIES = 4;

/**
 * The text from `open` (where a member's object value opens) to the `}` that ends it, when the
 * member is one of the root object's last: only plain members (string, number or literal values)
 * come after it. Undefined when the text does not end so.
 *
 * The caller parses what this gives. If that parses, it is the member's value and the member is
 * the root's: a JSON value is over at its first balanced closing bracket, so the value that opens
 * at `open` ends where this text ends, and after it come only plain members and the root's closing
 * brace. The text around it is not read, so not validated. If it does not parse, the member is
 * another (a nested one): the caller must read the whole text instead.
 */
export function rootMemberObject(s: string, open: number): string | undefined {
  let end = s.lastIndexOf('}', s.lastIndexOf('}') - 1);
  for (let i = 0; i < TRIES && end > open; i++, end = s.lastIndexOf('}', end - 1)) {
    TAIL.lastIndex = end;
    if (TAIL.test(s)) return s.slice(open, end + 1);
  }
  return undefined;
}

/** What `parsed` gives for a text that is not JSON. */
export const NOT_JSON: unique symbol = Symbol('not JSON');

/** `JSON.parse(text)`, or `NOT_JSON`. */
export function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return NOT_JSON;
  }
}

/** Where the value of the first `"usage":` member that is an object opens in `s`, or -1. */
export function usageObjectAt(s: string): number {
  const m = USAGE.exec(s);
  return m === null ? -1 : m.index + m[0].length - 1;
}
const USAGE = /"usage"\s*:\s*\{/;
