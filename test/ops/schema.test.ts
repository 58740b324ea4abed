/**
 * The schema editors use: the shipped gateway.yaml validates clean with yaml-language-server and
 * with ajv; `${VAR}` references are accepted wherever the loader accepts them (a config whose every
 * value is a reference loads to the same config and shows no editor error); wrong values are still
 * flagged; every setting is described; docs/config.md's reference is generated from the schema;
 * the documented defaults are the loader's.
 */
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv } from 'ajv';
import YAML, { isCollection, isScalar, visit, Scalar } from 'yaml';
import { ROOT, tmpDir } from '../helpers/gateway.js';
import { editorDiagnostics } from '../helpers/yls.js';
import { gatewaySchema } from '../../core/config/schema.js';
import { loadConfigFile, loadConfigText, type LoadedConfig } from '../../core/config/load.js';
import { builtinPlugins } from '../../plugins/index.js';
import { configReference, schemaText, withReference } from '../../scripts/write-schema.js';
import { parseDecimal, parseDuration, parseSize } from '../../core/units.js';

const SHIPPED = path.join(ROOT, 'gateway.yaml');
const SCHEMA_FILE = path.join(ROOT, 'gateway.schema.json');
const modeline = `# yaml-language-server: $schema=${new URL(`file://${SCHEMA_FILE}`).href}\n`;

t.test('the shipped gateway.yaml: no error in yaml-language-server, none in ajv with the same schema', async (t) => {
  t.same(await editorDiagnostics(SHIPPED), [], "yaml-language-server, through the file's own $schema line");
  const ajv = new Ajv({ allErrors: true, strict: false });
  const validate = ajv.compile(JSON.parse(readFileSync(SCHEMA_FILE, 'utf8')));
  const ok = validate(YAML.parse(readFileSync(SHIPPED, 'utf8')));
  t.ok(ok, JSON.stringify(validate.errors));
});

t.test('an editor still flags wrong values, unknown settings and broken references', async (t) => {
  const dir = tmpDir();
  t.teardown(() => undefined);
  const file = path.join(dir, 'gateway.yaml');
  const shipped = readFileSync(SHIPPED, 'utf8').replace(/^# yaml-language-server:.*\n/, modeline);
  const cases: Array<[string, string, RegExp]> = [
    ['port: ${GATEWAY_PORT:-8080}', 'port: eighty', /integer|type|pattern/i],
    ['port: ${GATEWAY_PORT:-8080}', 'port: ${GATEWAY_PORT:-8080', /integer|type|pattern/i],
    ['headers_timeout: 20s', 'headers_timeout: 20 seconds', /pattern|match/i],
    ['kind: memory ', 'kind: postgres ', /allowed|enum|value/i],
    ['body_limit: 256MiB', 'body_limt: 256MiB', /not allowed|property/i],
  ];
  for (const [from, to, message] of cases) {
    t.ok(shipped.includes(from), `the shipped file has ${from}`);
    const text = shipped.replace(from, to);
    writeFileSync(file, text);
    const d = await editorDiagnostics(file, text);
    t.equal(d.length, 1, `${to}: one diagnostic`);
    t.match(d[0]?.message, message, `${to}: ${d[0]?.message}`);
    t.equal(d[0]?.line, text.split('\n').findIndex((l) => l.includes(to.split(' ')[0])) + 1, 'on its line');
  }
});

/** Every scalar value in block style and replaced by `${CFG_n:-value}`. */
function everyValueAReference(text: string): string {
  const doc = YAML.parseDocument(text);
  let n = 0;
  visit(doc, {
    Map(_k, node) {
      node.flow = false;
    },
    Seq(_k, node) {
      node.flow = false;
    },
    Pair(_k, pair) {
      const v = pair.value;
      if (isScalar(v) && v.value !== null && !(typeof v.value === 'string' && v.value.includes('${'))) {
        // A string that reads as a number or a boolean stays a string: the loader types only plain references.
        const plainLooksTyped = typeof v.value === 'string' && /^(-?\d+(\.\d+)?|true|false)$/.test(v.value);
        const value = v.value as string | number | boolean; // a scalar, not null
        if (!plainLooksTyped) pair.value = new Scalar(`\${CFG_${n++}:-${v.source ?? String(value)}}`);
      }
    },
    Scalar(_k, node, path) {
      // sequence items
      const parent = path[path.length - 1];
      if (!isCollection(parent) || !YAML.isSeq(parent)) return;
      if (typeof node.value === 'string' && !node.value.includes('${')) return new Scalar(`\${CFG_${n++}:-${node.value}}`);
      return undefined;
    },
  });
  return doc.toString({ lineWidth: 0 });
}

const comparable = (l: LoadedConfig) => JSON.parse(JSON.stringify({ ...l.config, file: '' }));

t.test('${VAR} references are accepted wherever the loader accepts them', async (t) => {
  const referenced = everyValueAReference(readFileSync(SHIPPED, 'utf8').replace(/^# yaml-language-server:.*\n/, ''));
  const count = (referenced.match(/\$\{CFG_/g) ?? []).length;
  t.ok(count > 100, `${count} values are references: integers, decimals, booleans, enums, durations, sizes, names`);
  const dir = tmpDir();
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, modeline + referenced);
  t.same(await editorDiagnostics(file), [], 'yaml-language-server shows no error');
  const env = { GATEWAY_PORT: '8080', GATEWAY_HOST: '127.0.0.1' };
  const original = await loadConfigText(readFileSync(SHIPPED, 'utf8'), SHIPPED, { registry: builtinPlugins, env });
  const viaRefs = await loadConfigText(referenced, SHIPPED, { registry: builtinPlugins, env });
  t.same(comparable(viaRefs), comparable(original), 'and the loader reads the same config from it');
  t.rejects(
    loadConfigText(referenced, SHIPPED, { registry: builtinPlugins, env: { ...env, CFG_0: 'not-a-version' } }),
    "a reference that yields a wrong value is the loader's error",
  );
});

t.test('every setting is described', async (t) => {
  const missing: string[] = [];
  const walk = (n: any, at: string) => {
    if (!n || typeof n !== 'object') return;
    for (const [k, v] of Object.entries<any>(n.properties ?? {})) {
      if (!v.description) missing.push(`${at}${k}`);
      walk(v, `${at}${k}.`);
    }
    if (n.additionalProperties && typeof n.additionalProperties === 'object') walk(n.additionalProperties, `${at}<name>.`);
    if (n.items) walk(n.items, `${at}[].`);
  };
  walk(gatewaySchema, '');
  for (const p of builtinPlugins.values()) walk(p.schema, `plugins.<${p.name}>.with.`);
  t.same(missing, [], 'a description for each');
  let count = 0;
  const counter = (n: any) => {
    for (const v of Object.values<any>(n?.properties ?? {})) {
      count++;
      counter(v);
    }
    if (n?.additionalProperties && typeof n.additionalProperties === 'object') counter(n.additionalProperties);
    if (n?.items) counter(n.items);
  };
  counter(gatewaySchema);
  t.ok(count >= 100, `${count} settings`);
});

t.test('gateway.schema.json and the reference in docs/config.md are generated from the schema', async (t) => {
  t.equal(readFileSync(SCHEMA_FILE, 'utf8'), schemaText(), 'gateway.schema.json: run `npm run schema`');
  const doc = readFileSync(path.join(ROOT, 'docs/config.md'), 'utf8');
  t.equal(doc, withReference(doc), 'docs/config.md: run `npm run schema`');
  const ref = configReference();
  for (const section of Object.keys(gatewaySchema.properties).filter((k) => k !== '$schema')) t.match(ref, `## \`${section}\``);
  t.match(ref, '| `shutdown_delay` | duration | `0s` |');
  t.match(ref, '| `queue.max_wait` | duration | `30s` |', 'nested settings have dotted keys');
  t.match(ref, '| `subscriptions[].group` |');
  t.match(ref, '| `fallback` |', 'the built-in plugins and their options');
});

const camel = (k: string) => k.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());

t.test("documented defaults are the loader's defaults", async (t) => {
  const minimal = {
    version: 1,
    providers: { p: { kind: 'mock' } },
    models: { m: { provider: 'p', price: { input: 0, output: 0 } } },
    groups: { g: { kind: 'chat' } },
    users: { u: {} },
    keys: [{ key: `sk-${'e'.repeat(64)}`, user: 'u', group: 'g' }],
    plugins: { auth: { use: 'auth' } },
    chains: { c: ['auth'] },
    routes: [{ path: '/x', protocol: 'openai-chat', chain: 'c' }],
  };
  const dir = tmpDir();
  const file = path.join(dir, 'gateway.yaml');
  writeFileSync(file, YAML.stringify(minimal));
  const { config } = await loadConfigFile(file, { registry: builtinPlugins });
  const checked: string[] = [];
  const compare = (schema: any, obj: any, at: string) => {
    for (const [k, v] of Object.entries<any>(schema.properties ?? {})) {
      if (v.type === 'object' && v.properties && obj?.[camel(k)] !== undefined) compare(v, obj[camel(k)], `${at}${k}.`);
      if (!('default' in v)) continue;
      let actual: unknown;
      let expected: unknown = v.default;
      if (v.title === 'duration') {
        actual = obj[`${camel(k)}Ms`];
        expected = parseDuration(v.default);
      } else if (v.title === 'size') {
        actual = obj[camel(k)];
        expected = parseSize(v.default);
      } else if (v.title === 'USD') {
        actual = obj[camel(k)];
        expected = parseDecimal(v.default, 6);
      } else if (k === 'multiplier') {
        actual = obj.multiplierPpm;
        expected = parseDecimal(v.default, 6);
      } else if (`${at}${k}` === 'store.path') {
        actual = obj.path;
        expected = path.join(dir, v.default);
      } else actual = obj[camel(k)];
      t.same(actual, expected, `${at}${k}: ${JSON.stringify(v.default)}`);
      checked.push(`${at}${k}`);
    }
  };
  const props = (gatewaySchema as any).properties;
  for (const section of ['server', 'store', 'metrics', 'limits']) compare(props[section], (config as any)[section], `${section}.`);
  compare(props.failed_requests, config.failedRequests, 'failed_requests.');
  compare(props.providers.additionalProperties, config.providers.p, 'providers.*.');
  compare(props.models.additionalProperties, config.models.m, 'models.*.');
  compare(props.groups.additionalProperties, config.groups.g, 'groups.*.');
  compare(props.users.additionalProperties, config.users.u, 'users.*.');
  compare(props.keys.items, config.keys[0], 'keys[].');
  compare(props.routes.items, config.routes[0], 'routes[].');
  t.ok(checked.length >= 40, `${checked.length} defaults checked`);
});
