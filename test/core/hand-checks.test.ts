/**
 * Checks written by hand on the request path in place of a regular expression or a runtime call
 * (for their cost in a loaded gateway's profile) give the answers of what they replaced, for every
 * character of the Basic Multilingual Plane and lone surrogates.
 */
import t from 'tap';
import { quotedOnce } from '../../core/json/quote.js';
import { plainPath } from '../../core/server.js';

const PLAIN_PATH = /^\/(?!\/)[A-Za-z0-9_/-]*$/;

t.test('plainPath is the pattern it replaced', async (t) => {
  let differ = 0;
  for (let c = 0; c <= 0xffff; c++) {
    const ch = String.fromCharCode(c);
    for (const p of [`/v1${ch}x`, `/${ch}`, `${ch}/v1`, `/${ch}/`, `/v1/chat/completion${ch}`]) {
      if (plainPath(p) !== PLAIN_PATH.test(p)) differ++;
    }
  }
  t.equal(differ, 0, 'the same answer for every character in every position');
  for (const p of ['/v1/chat/completions', '/v1/messages/count_tokens', '/v1/models/gpt-4o', '/A_Z-09/']) {
    t.ok(plainPath(p), `${p} is plain`);
  }
  for (const p of ['', '/', 'v1', '//v1', '/v1/../x', '/v1/a b', '/v1/a%2Fb', '/v1/é', '/v1/x?y']) {
    t.equal(plainPath(p), PLAIN_PATH.test(p), `${JSON.stringify(p)}: ${PLAIN_PATH.test(p)}`);
  }
});

t.test('quotedOnce is JSON.stringify of a string', async (t) => {
  let differ = 0;
  for (let c = 0; c <= 0xffff; c++) {
    const ch = String.fromCharCode(c);
    for (const s of [ch, `req_${ch}`, `${ch}abc`]) if (quotedOnce(s) !== JSON.stringify(s)) differ++;
  }
  t.equal(differ, 0, 'the same text for every character');
  for (const s of ['', 'req_3f2a9c1b00000000002a', 'a"b', 'a\\b', 'line\nbreak', '\ud83d\ude00', '\ud800 lone', 'tab\t']) {
    t.equal(quotedOnce(s), JSON.stringify(s), JSON.stringify(s));
  }
});
