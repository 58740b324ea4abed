/**
 * A real OTLP/HTTP trace receiver for tests: an HTTP server taking `POST /v1/traces` in protobuf
 * (`application/x-protobuf`) or JSON (`application/json`), as a collector does, decoding every
 * span it is sent. The protobuf decoding is written here from opentelemetry-proto's field numbers
 * (trace.proto, common.proto, resource.proto), independently of the SDK's encoder, so a test reads
 * what went over the wire, not what the SDK meant to send.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  traceState: string;
  name: string;
  /** 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, unknown>;
  /** 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  resource: Record<string, unknown>;
  scope: { name: string; version: string };
}

export interface ExportRequest {
  contentType: string;
  headers: http.IncomingHttpHeaders;
  spans: ReceivedSpan[];
}

export interface OtlpReceiver {
  /** The traces URL (http://127.0.0.1:PORT/v1/traces). */
  url: string;
  /** Base URL without a path. */
  base: string;
  spans: ReceivedSpan[];
  exports: ExportRequest[];
  /** The status to answer exports with (200 by default; set 500 to refuse them). */
  status: number;
  /** Resolves with the spans once `pred` holds for the spans received (past or future). */
  waitFor(pred: (spans: ReceivedSpan[]) => boolean, ms?: number): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const exports: ExportRequest[] = [];
  const waiters = new Set<() => void>();
  const r: OtlpReceiver = {
    url: '',
    base: '',
    spans,
    exports,
    status: 200,
    waitFor(pred, ms = 60_000) {
      if (pred(spans)) return Promise.resolve(spans);
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!pred(spans)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(spans);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`the spans expected did not arrive within ${ms} ms; received: ${JSON.stringify(spans.map((s) => s.name))}`));
        }, ms);
        waiters.add(check);
      });
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const contentType = String(req.headers['content-type'] ?? '');
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      if (r.status !== 200) {
        res.writeHead(r.status, { 'content-type': 'text/plain' }).end('refused by the test');
        return;
      }
      let got: ReceivedSpan[];
      try {
        got = contentType.startsWith('application/x-protobuf') ? decodeProtobuf(body) : decodeJson(JSON.parse(body.toString('utf8')));
      } catch (e) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(String(e));
        return;
      }
      exports.push({ contentType, headers: req.headers, spans: got });
      spans.push(...got);
      if (contentType.startsWith('application/x-protobuf')) res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      else res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      for (const w of [...waiters]) w();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  r.base = `http://127.0.0.1:${port}`;
  r.url = `${r.base}/v1/traces`;
  return r;
}

// ---- OTLP/JSON ---------------------------------------------------------------------------------

function jsonValue(v: any): unknown {
  if (!v || typeof v !== 'object') return undefined;
  if ('stringValue' in v) return v.stringValue;
  if ('boolValue' in v) return v.boolValue;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return Number(v.doubleValue);
  if ('arrayValue' in v) return (v.arrayValue.values ?? []).map(jsonValue);
  if ('kvlistValue' in v) return jsonAttributes(v.kvlistValue.values);
  if ('bytesValue' in v) return v.bytesValue;
  return undefined;
}

function jsonAttributes(list: any[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key] = jsonValue(kv.value);
  return out;
}

/** OTLP/JSON ids are hex strings (the spec's one departure from the protobuf JSON mapping). */
function decodeJson(body: any): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of body.resourceSpans ?? []) {
    const resource = jsonAttributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      const scope = { name: ss.scope?.name ?? '', version: ss.scope?.version ?? '' };
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: String(s.traceId ?? '').toLowerCase(),
          spanId: String(s.spanId ?? '').toLowerCase(),
          parentSpanId: String(s.parentSpanId ?? '').toLowerCase(),
          traceState: s.traceState ?? '',
          name: s.name,
          kind: Number(s.kind ?? 0),
          startNs: BigInt(s.startTimeUnixNano ?? 0),
          endNs: BigInt(s.endTimeUnixNano ?? 0),
          attributes: jsonAttributes(s.attributes),
          status: { code: Number(s.status?.code ?? 0), message: s.status?.message ?? '' },
          resource,
          scope,
        });
      }
    }
  }
  return out;
}

// ---- OTLP/protobuf -----------------------------------------------------------------------------

/** One protobuf field: its number, and its value (a varint, 64 or 32 fixed bits, or bytes). */
interface Field {
  no: number;
  varint?: bigint;
  fixed?: Buffer;
  bytes?: Buffer;
}

function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      if (i >= buf.length) throw new Error('truncated varint');
      const b = buf[i++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const no = key >>> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ no, varint: varint() });
    else if (wire === 1) {
      out.push({ no, fixed: buf.subarray(i, i + 8) });
      i += 8;
    } else if (wire === 2) {
      const len = Number(varint());
      if (i + len > buf.length) throw new Error('truncated field');
      out.push({ no, bytes: buf.subarray(i, i + len) });
      i += len;
    } else if (wire === 5) {
      out.push({ no, fixed: buf.subarray(i, i + 4) });
      i += 4;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const str = (f: Field | undefined) => f?.bytes?.toString('utf8') ?? '';

/** AnyValue: 1 string, 2 bool, 3 int, 4 double, 5 array, 6 kvlist, 7 bytes. */
function anyValue(buf: Buffer): unknown {
  for (const f of fields(buf)) {
    switch (f.no) {
      case 1:
        return str(f);
      case 2:
        return f.varint !== 0n;
      case 3:
        return Number(BigInt.asIntN(64, f.varint!));
      case 4:
        return f.fixed!.readDoubleLE(0);
      case 5:
        return fields(f.bytes!)
          .filter((x) => x.no === 1)
          .map((x) => anyValue(x.bytes!));
      case 6:
        return keyValues(fields(f.bytes!).filter((x) => x.no === 1));
      case 7:
        return f.bytes!.toString('hex');
    }
  }
  return undefined;
}

/** KeyValue: 1 key, 2 value. */
function keyValues(list: Field[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list) {
    const fs = fields(kv.bytes!);
    const value = fs.find((x) => x.no === 2);
    out[str(fs.find((x) => x.no === 1))] = value ? anyValue(value.bytes!) : undefined;
  }
  return out;
}

/**
 * ExportTraceServiceRequest: 1 resource_spans. ResourceSpans: 1 resource (1 attributes),
 * 2 scope_spans. ScopeSpans: 1 scope (1 name, 2 version), 2 spans. Span: 1 trace_id, 2 span_id,
 * 3 trace_state, 4 parent_span_id, 5 name, 6 kind, 7 start (fixed64), 8 end (fixed64),
 * 9 attributes, 15 status (2 message, 3 code).
 */
function decodeProtobuf(body: Buffer): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of fields(body).filter((f) => f.no === 1)) {
    const rsf = fields(rs.bytes!);
    const res = rsf.find((f) => f.no === 1);
    const resource = res ? keyValues(fields(res.bytes!).filter((f) => f.no === 1)) : {};
    for (const ss of rsf.filter((f) => f.no === 2)) {
      const ssf = fields(ss.bytes!);
      const sc = ssf.find((f) => f.no === 1);
      const scf = sc ? fields(sc.bytes!) : [];
      const scope = { name: str(scf.find((f) => f.no === 1)), version: str(scf.find((f) => f.no === 2)) };
      for (const sp of ssf.filter((f) => f.no === 2)) {
        const s = fields(sp.bytes!);
        const one = (no: number) => s.find((f) => f.no === no);
        const st = one(15);
        const stf = st ? fields(st.bytes!) : [];
        out.push({
          traceId: one(1)?.bytes?.toString('hex') ?? '',
          spanId: one(2)?.bytes?.toString('hex') ?? '',
          parentSpanId: one(4)?.bytes?.toString('hex') ?? '',
          traceState: str(one(3)),
          name: str(one(5)),
          kind: Number(one(6)?.varint ?? 0n),
          startNs: one(7)?.fixed?.readBigUInt64LE(0) ?? 0n,
          endNs: one(8)?.fixed?.readBigUInt64LE(0) ?? 0n,
          attributes: keyValues(s.filter((f) => f.no === 9)),
          status: { code: Number(stf.find((f) => f.no === 3)?.varint ?? 0n), message: str(stf.find((f) => f.no === 2)) },
          resource,
          scope,
        });
      }
    }
  }
  return out;
}
