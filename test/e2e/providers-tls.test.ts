/**
 * A provider over HTTPS, as every real one is: the gateway's own HTTP client (core/upstream/h1.ts)
 * checks the certificate, keeps the TLS connection for the requests that follow, and serves both a
 * whole answer and a stream through it. The provider here is the mock behind a TLS front with a
 * test certificate; the gateway process trusts it as an operator trusts a private CA
 * (NODE_EXTRA_CA_CERTS); a gateway that does not trust it refuses it.
 */
import t from 'tap';
import net from 'node:net';
import tls from 'node:tls';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startMockServer, type MockServer } from '../../mock/server.js';
import { baseConfig, bearer, call, chatBody, KEYS, startGateway, writeConfig } from '../helpers/gateway.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/process.js';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../../test/fixtures/tls');

let mock: MockServer;
let front: tls.Server;
let handshakes = 0;
let gp: GatewayProcess;
let cfg: ReturnType<typeof baseConfig>;

t.before(async () => {
  mock = await startMockServer();
  // TLS in front of the mock: each connection piped to it.
  front = tls.createServer(
    { key: readFileSync(path.join(FIXTURES, 'localhost.key')), cert: readFileSync(path.join(FIXTURES, 'localhost.crt')) },
    (s) => {
      handshakes++;
      const up = net.connect(mock.port, '127.0.0.1');
      s.pipe(up).pipe(s);
      s.on('error', () => up.destroy());
      up.on('error', () => s.destroy());
    },
  );
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  const port = (front.address() as net.AddressInfo).port;
  cfg = baseConfig();
  cfg.providers.openai = { kind: 'openai', base_url: `https://localhost:${port}/v1`, api_key: 'openai-secret' };
  cfg.models['gpt-tls'] = { provider: 'openai', upstream: 'gpt-5-mini', price: { input: 1, output: 1 } };
  cfg.groups.chat.models.push('gpt-tls');
  gp = await startGatewayProcess(writeConfig(cfg), { env: { NODE_EXTRA_CA_CERTS: path.join(FIXTURES, 'localhost.crt') } });
});
t.teardown(async () => {
  await gp?.stop();
  await new Promise<void>((r) => front.close(() => r()));
  await mock.close();
});

t.test('a trusted HTTPS provider: whole answers and streams, one TLS connection for requests in turn', async (t) => {
  const before = handshakes;
  for (let i = 0; i < 3; i++) {
    const r = await call(gp.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'gpt-tls' }) });
    t.equal(r.status, 200);
    t.equal(r.json?.object, 'chat.completion');
    t.ok(r.json?.usage?.prompt_tokens > 0, 'with the upstream usage');
  }
  const s = await call(gp.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'gpt-tls', stream: true }) });
  t.equal(s.status, 200);
  t.match(s.headers.get('content-type'), /text\/event-stream/);
  t.match(s.text, /"object":"chat\.completion\.chunk"/);
  t.ok(s.text.trimEnd().endsWith('data: [DONE]'), 'the stream ends as the provider ended it');
  t.equal(mock.requests.at(-1)?.headers.authorization, 'Bearer openai-secret', "the account's credential, over TLS");
  t.equal(handshakes - before, 1, 'four requests in turn, one TLS connection');
});

t.test('an HTTPS provider whose certificate is not trusted is refused: 502 upstream_error, nothing sent', async (t) => {
  const g = await startGateway(cfg);
  t.teardown(() => g.close());
  const seen = mock.credential('openai-secret').requests;
  const r = await call(g.url + '/v1/chat/completions', { headers: bearer(KEYS.chat), json: chatBody({ model: 'gpt-tls' }) });
  t.equal(r.status, 502);
  t.equal(r.json?.error?.type, 'upstream_error');
  t.equal(r.json?.error?.message, 'Could not reach the upstream provider');
  t.equal(mock.credential('openai-secret').requests, seen, 'the mock saw nothing');
});
