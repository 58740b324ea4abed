/**
 * Shutdown past `server.drain_timeout` (issue 26, item 9): a stream still running is ended by the
 * gateway with its protocol's error event — never a silent close — logged as the gateway's doing
 * (not a client that went away), and billed what it streamed; a request not answered yet gets a
 * retryable 503.
 */
import t from 'tap';
import { baseConfig, bearer, chatBody, KEYS, messagesBody, responsesBody, startGateway } from '../helpers/gateway.js';
import { createLogger } from '../../core/log.js';

const SLOW = '[[mock: words=400 chunk_delay=40]] go';

t.test('streams cut by drain_timeout end with the protocol error event, logged as the gateway ending them, and billed', async (t) => {
  const cfg = baseConfig();
  cfg.server.drain_timeout = '500ms';
  const lines: Record<string, any>[] = [];
  const g = await startGateway(cfg, { log: createLogger('info', (l) => lines.push(JSON.parse(l))) });
  const streams = [
    {
      name: 'chat',
      route: 'openai-chat',
      path: '/v1/chat/completions',
      headers: bearer(KEYS.chat),
      body: chatBody({ stream: true, messages: [{ role: 'user', content: SLOW }] }),
    },
    {
      name: 'messages',
      route: 'anthropic-messages',
      path: '/v1/messages',
      headers: { 'x-api-key': KEYS.messages, 'anthropic-version': '2023-06-01' },
      body: messagesBody({ stream: true, messages: [{ role: 'user', content: SLOW }] }),
    },
    {
      name: 'responses',
      route: 'openai-responses',
      path: '/v1/responses',
      headers: bearer(KEYS.responses),
      body: responsesBody({ stream: true, input: SLOW }),
    },
  ];
  // Each stream is read until its first content has arrived, then the gateway shuts down.
  const readers = await Promise.all(
    streams.map(async (s) => {
      const res = await fetch(g.url + s.path, {
        method: 'POST',
        headers: { ...s.headers, 'content-type': 'application/json' },
        body: JSON.stringify(s.body),
      });
      t.equal(res.status, 200, `${s.name}: streaming`);
      const reader = res.body!.getReader();
      let text = '';
      while (!/delta/.test(text)) {
        const { value, done } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
      return { ...s, reader, text, id: res.headers.get('x-request-id') };
    }),
  );
  // A non-streaming request whose upstream has not answered yet.
  const waiting = fetch(g.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { ...bearer(KEYS.chat), 'content-type': 'application/json' },
    body: JSON.stringify(chatBody({ messages: [{ role: 'user', content: '[[mock: delay=30000]] wait' }] })),
  });
  // Shut down once the upstream has it (and the three streams are still running).
  const mock = g.gw.mocks.get('mock')!;
  while (!mock.requests.some((r) => r.body.includes('delay=30000'))) await new Promise((r) => setTimeout(r, 10));
  const closing = g.close();
  const ends = await Promise.all(
    readers.map(async (r) => {
      let text = r.text;
      let error: unknown;
      try {
        for (;;) {
          const { value, done } = await r.reader.read();
          if (done) break;
          text += Buffer.from(value).toString('utf8');
        }
      } catch (e) {
        error = e;
      }
      return { ...r, text, error };
    }),
  );
  await closing;
  const unanswered = await waiting;
  t.equal(unanswered.status, 503, 'a request not answered yet: 503');
  t.equal(unanswered.headers.get('x-should-retry'), null, 'which clients retry (another instance answers)');
  t.match(await unanswered.json(), { error: { type: 'api_error', code: 'server_shutting_down' } });
  for (const r of ends) {
    t.equal(r.error, undefined, `${r.name}: the stream ended cleanly (no reset, no truncated chunk)`);
    t.match(r.text, /event: error\ndata: \{[^\n]*The gateway is shutting down/, `${r.name}: the error event says why`);
    t.notMatch(r.text, /data: \[DONE\]/, `${r.name}: not presented as complete`);
  }
  t.match(ends[0].text, /event: error\ndata: \{"error":\{"type":"api_error","code":"server_shutting_down"/, 'chat: the Chat error shape');
  t.match(
    ends[1].text,
    /event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The gateway is shutting down/,
    'messages: the Messages error shape',
  );
  t.match(ends[2].text, /event: error\n[\s\S]*event: response\.failed\n/, 'responses: error, then response.failed');
  for (const s of readers) {
    const access = lines.find((l) => l.msg === 'request' && l.requestId === s.id);
    t.ok(access, `${s.name}: an access line`);
    t.equal(access?.status, 200, `${s.name}: the status that was sent`);
    t.equal(access?.errorCode, 'server_shutting_down', `${s.name}: ended by the gateway`);
    t.notOk(access?.clientAborted, `${s.name}: not a client that went away`);
    t.ok(access?.tokens?.output > 0, `${s.name}: the streamed output is counted`);
    t.ok(access?.costMicroUsd > 0, `${s.name}: and billed`);
  }
  t.ok(
    lines.some((l) => l.msg.startsWith('drain_timeout passed') && l.requests === 4),
    'the shutdown says it ended four requests',
  );
});
