/**
 * Writes gateway.schema.json: the config schema, with each built-in plugin's `with:` schema wired in
 * (by `use:` name) so editors complete and check plugin options too. A test keeps the file in step.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gatewaySchema } from '../core/config/schema.js';
import { builtinPlugins } from '../plugins/index.js';

export function editorSchema(): Record<string, unknown> {
  const schema = structuredClone(gatewaySchema) as any;
  const instance = schema.properties.plugins.additionalProperties;
  instance.allOf = [...builtinPlugins.values()].map((p) => ({
    if: { properties: { use: { const: p.name } }, required: ['use'] },
    then: { properties: { with: p.schema } },
  }));
  instance.properties.use.examples = [...builtinPlugins.keys()];
  return schema;
}

export function schemaText(): string {
  return JSON.stringify(editorSchema(), null, 2) + '\n';
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(path.join(root, 'gateway.schema.json'), schemaText());
  console.log('wrote gateway.schema.json');
}
