/**
 * Texts written by hand on the request path in place of a runtime call (for its cost in a loaded
 * gateway's profile) are the texts of what they replaced, for every character of the Basic
 * Multilingual Plane, lone surrogates included.
 */
import t from 'tap';
import { quotedOnce } from '../../core/json/quote.js';

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
