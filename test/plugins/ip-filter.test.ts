/** ip-filter: CIDR lists (v4, v6, mapped), deny wins, trusted proxies and X-Forwarded-For. */
import t from 'tap';
import net from 'node:net';
import { clientAddress, compileList } from '../../plugins/ip-filter/index.js';
import { baseConfig, bearer, call, chatBody, startGateway, KEYS, type TestGateway } from '../helpers/gateway.js';

t.test('clientAddress walks X-Forwarded-For right to left past trusted hops only', async (t) => {
  const trusted = compileList(['127.0.0.1', '10.0.0.0/8', '::1'], 'test')!;
  t.equal(clientAddress('127.0.0.1', ['1.1.1.1, 10.0.0.5'], trusted), '1.1.1.1');
  t.equal(clientAddress('::ffff:127.0.0.1', ['1.1.1.1'], trusted), '1.1.1.1', 'mapped socket address');
  t.equal(clientAddress('127.0.0.1', ['6.6.6.6, 2.2.2.2, 10.1.1.1'], trusted), '2.2.2.2', 'spoofed left entries ignored');
  t.equal(clientAddress('9.9.9.9', ['1.1.1.1'], trusted), '9.9.9.9', 'untrusted socket: header ignored');
  t.equal(clientAddress('127.0.0.1', [], trusted), '127.0.0.1');
  t.equal(clientAddress('127.0.0.1', ['garbage, 10.0.0.2'], trusted), '', 'an unreadable hop hides the client: unknown, never the proxy');
  t.equal(clientAddress('127.0.0.1', ['1.1.1.1:5555'], trusted), '1.1.1.1', 'IPv4 with a port');
  t.equal(clientAddress('127.0.0.1', ['[2001:db8::7]:443'], trusted), '2001:db8::7');
  t.equal(clientAddress('127.0.0.1', ['1.1.1.1'], undefined), '127.0.0.1', 'no trusted proxies: socket');
  t.equal(clientAddress('127.0.0.1', ['10.9.8.7, '], trusted), '', 'an empty last hop is unreadable: unknown, not the hop before it');
  t.equal(clientAddress('127.0.0.1', ['1.1.1.1,,10.0.0.2'], trusted), '', 'an empty hop in the middle: unknown');
  t.equal(clientAddress('127.0.0.1', [''], trusted), '', 'an empty header: unknown');
  t.equal(clientAddress('127.0.0.1', ['1.1.1.1', ' '], trusted), '', 'a second, blank header: unknown');
});

t.test('compileList matches v4, v6 and IPv4-mapped IPv6, and rejects junk', async (t) => {
  const l = compileList(['10.0.0.0/8', '2001:db8::/32', '192.0.2.7'], 'x')!;
  t.ok(l.check('10.9.9.9', 'ipv4'));
  t.ok(l.check('::ffff:10.9.9.9', 'ipv6'));
  t.ok(l.check('2001:db8::1', 'ipv6'));
  t.ok(l.check('192.0.2.7', 'ipv4'));
  t.notOk(l.check('192.0.2.8', 'ipv4'));
  t.throws(() => compileList(['10.0.0.0/33'], 'x'));
  t.throws(() => compileList(['banana'], 'x'));
  t.ok(net.isIP('::1'));
});

let g: TestGateway;
const K = { allowV6: 'sk-' + 'a7'.repeat(32), denyOne: 'sk-' + 'a8'.repeat(32) };

t.before(async () => {
  const cfg = baseConfig();
  cfg.server.trusted_proxies = ['127.0.0.1', '::1'];
  cfg.plugins['ip-filter'] = { use: 'ip-filter', with: { deny: ['203.0.113.0/24', '2001:db8:dead::/48'] } };
  cfg.keys.push(
    {
      key: K.allowV6,
      name: 'allow-v6',
      user: 'alice',
      group: 'chat',
      ip_allow: ['2001:db8::/32', '198.51.100.0/24'],
      ip_deny: ['198.51.100.66'],
    },
    { key: K.denyOne, name: 'deny-one', user: 'alice', group: 'chat', ip_deny: ['10.0.0.0/8'] },
  );
  g = await startGateway(cfg);
});
t.teardown(() => g.close());

const from = (key: string, xff: string) =>
  call(g.url + '/v1/chat/completions', { headers: { ...bearer(key), 'x-forwarded-for': xff }, json: chatBody() });

t.test('global and per-key lists through a trusted proxy', async (t) => {
  const denied = await from(KEYS.chat, '203.0.113.9');
  t.equal(denied.status, 403);
  t.same(
    denied.json,
    {
      code: 'ACCESS_DENIED',
      message: 'Access denied',
      error: { type: 'permission_error', code: 'ACCESS_DENIED', message: 'Access denied' },
    },
    'vague message, flat body',
  );
  t.equal((await from(KEYS.chat, '198.18.0.1')).status, 200, 'not listed: allowed');
  t.equal((await from(KEYS.chat, '2001:db8:dead::1')).status, 403, 'IPv6 global deny');
  t.equal((await from(K.allowV6, '2001:db8::abcd')).status, 200, 'key allow (IPv6)');
  t.equal((await from(K.allowV6, '198.51.100.5')).status, 200, 'key allow (IPv4)');
  t.equal((await from(K.allowV6, '198.51.100.66')).status, 403, 'deny wins over allow');
  t.equal((await from(K.allowV6, '8.8.8.8')).status, 403, 'outside the key allow list');
  t.equal((await from(K.denyOne, '::ffff:10.1.2.3')).status, 403, 'IPv4-mapped IPv6 matches an IPv4 rule');
  t.equal((await from(K.denyOne, '11.0.0.1')).status, 200);
  t.equal((await from(K.denyOne, '10.1.1.1:5555')).status, 403, 'a hop with a port is read as its address');
  t.equal((await from(KEYS.chat, 'not-an-address')).status, 403, 'an unreadable hop: the client is unknown, refused where a list applies');
  t.equal((await from(K.allowV6, '198.51.100.5, ')).status, 403, 'an empty last hop: unknown, so outside the key allow list');
  t.equal((await from(KEYS.chat, '198.18.0.1, ')).status, 403, 'an empty last hop: unknown, refused by the global deny list too');
});

t.test('per-key lists hold whatever the chain order (ip-filter before auth)', async (t) => {
  const cfg = baseConfig();
  cfg.keys.push({ key: K.denyOne, name: 'deny-local', user: 'alice', group: 'chat', ip_deny: ['127.0.0.0/8'] });
  cfg.chains['model-call'] = [
    'ip-filter',
    'auth',
    'quota',
    'windows',
    'rpm',
    'concurrency',
    'body-rewriter',
    'converter',
    'fallback',
    'metering',
  ];
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const r = await call(g2.url + '/v1/chat/completions', { headers: bearer(K.denyOne), json: chatBody() });
  t.equal(r.status, 403);
  t.same(r.json, {
    code: 'ACCESS_DENIED',
    message: 'Access denied',
    error: { type: 'permission_error', code: 'ACCESS_DENIED', message: 'Access denied' },
  });
  t.equal((await call(g2.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody() })).status, 200, 'other keys pass');
});

t.test('an untrusted socket cannot spoof X-Forwarded-For', async (t) => {
  const cfg = baseConfig();
  cfg.plugins['ip-filter'] = { use: 'ip-filter', with: { allow: ['198.51.100.0/24'] } };
  const g2 = await startGateway(cfg);
  t.teardown(() => g2.close());
  const r = await call(g2.url + '/v1/chat/completions', {
    headers: { ...bearer(KEYS.chat), 'x-forwarded-for': '198.51.100.1' },
    json: chatBody(),
  });
  t.equal(r.status, 403, 'the socket (127.0.0.1) is the client: not in the allow list');
});
