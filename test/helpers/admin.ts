/**
 * An admin API client for tests that checks every answer against the OpenAPI document the gateway
 * serves at /admin/openapi.json: the document itself against the OpenAPI 3.1 schema
 * (@seriousme/openapi-schema-validator), each response body against its operation's schema for the
 * status (ajv, JSON Schema 2020-12 with formats). A response the document does not describe fails.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Validator } from '@seriousme/openapi-schema-validator';
import { call, type Reply } from './gateway.js';

type Doc = {
  paths: Record<string, Record<string, { responses?: Record<string, { content?: Record<string, { schema: object }> }> }>>;
  components: { schemas: Record<string, object> };
};

export interface Checked extends Reply {
  /** The operation and status the body was checked against. */
  checked: string;
}

export class AdminClient {
  private doc!: Doc;
  private ajv!: Ajv2020;
  private readonly validators = new Map<string, ValidateFunction | null>();
  private templates: { template: string; re: RegExp }[] = [];
  /** Every check made (operation status), for a test that wants to see coverage. */
  readonly seen = new Set<string>();

  constructor(
    readonly url: string,
    public token: string,
  ) {}

  /** Fetches the document and checks it is a valid OpenAPI 3.1 document. */
  async init(): Promise<this> {
    const r = await call(`${this.url}/admin/openapi.json`);
    if (r.status !== 200) throw new Error(`GET /admin/openapi.json: ${r.status} ${r.text}`);
    const v = new Validator();
    const res = await v.validate(r.json);
    if (!res.valid) throw new Error(`/admin/openapi.json is not a valid OpenAPI document: ${JSON.stringify(res.errors).slice(0, 2000)}`);
    if (v.version !== '3.1') throw new Error(`expected OpenAPI 3.1, got ${v.version}`);
    this.doc = r.json as Doc;
    this.ajv = new Ajv2020({ allErrors: true, strict: false });
    addFormats.default(this.ajv);
    this.ajv.addSchema({ $id: 'doc', components: this.doc.components });
    this.templates = Object.keys(this.doc.paths).map((template) => ({
      template,
      re: new RegExp(`^${template.replace(/\{\w+\}/g, '[^/]+')}$`),
    }));
    return this;
  }

  private validatorFor(template: string, method: string, status: number): ValidateFunction | null {
    const id = `${method} ${template} ${status}`;
    if (this.validators.has(id)) return this.validators.get(id)!;
    const op = this.doc.paths[template]?.[method.toLowerCase()];
    const resp = op?.responses?.[String(status)];
    if (!resp) throw new Error(`${method} ${template}: status ${status} is not in the OpenAPI document`);
    const schema = resp.content?.['application/json']?.schema;
    const fn = schema ? this.ajv.compile(JSON.parse(JSON.stringify(schema).replace(/"#\/components/g, '"doc#/components'))) : null;
    this.validators.set(id, fn);
    return fn;
  }

  /** A call; its answer must be what the document says for its status. */
  async req(method: string, path: string, json?: unknown, headers: Record<string, string> = {}): Promise<Checked> {
    const r = await call(`${this.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...headers },
      ...(json !== undefined ? { json } : {}),
    });
    const pathname = path.split('?')[0];
    const t = this.templates.find((x) => x.re.test(pathname));
    if (!t) throw new Error(`${method} ${pathname}: no such path in the OpenAPI document (answered ${r.status})`);
    const v = this.validatorFor(t.template, method, r.status);
    if (v && !v(r.json)) {
      throw new Error(
        `${method} ${path} → ${r.status}: the body does not match the document: ${JSON.stringify(v.errors)}\n${r.text.slice(0, 2000)}`,
      );
    }
    if (!v && r.text !== '') throw new Error(`${method} ${path} → ${r.status}: the document says no body, got ${r.text.slice(0, 200)}`);
    const checked = `${method} ${t.template} ${r.status}`;
    this.seen.add(checked);
    return { ...r, checked };
  }

  /** Checks a body against the document's one error shape (for answers no operation describes: 404, 405). */
  isError(json: unknown): boolean {
    const v = this.ajv.getSchema('doc#/components/schemas/Error');
    if (!v) throw new Error('no Error schema in the document');
    return v(json) as boolean;
  }

  /**
   * A write as an operator's script makes one: a 503 store_unavailable (the store was slow or away,
   * and the write was not applied: docs/accounts.md) is sent again, with the same body and headers
   * (so a top-up keeps its Idempotency-Key), until it answers otherwise or `ms` pass. For a test's
   * setup on a real Redis, where a stalled fsync on a busy machine can outlast the store's timeout.
   */
  async write(method: string, path: string, json?: unknown, headers?: Record<string, string>, ms = 30_000): Promise<Checked> {
    const start = Date.now();
    for (;;) {
      const r = await this.req(method, path, json, headers);
      if (r.status !== 503 || r.json?.error?.code !== 'store_unavailable' || Date.now() - start > ms) return r;
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  get = (path: string) => this.req('GET', path);
  post = (path: string, json?: unknown, headers?: Record<string, string>) => this.req('POST', path, json, headers);
  patch = (path: string, json?: unknown) => this.req('PATCH', path, json);
  del = (path: string) => this.req('DELETE', path);
}
