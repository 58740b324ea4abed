/**
 * Loading plugins from outside the gateway: `use: ./path.js` (a file, relative to the config) and
 * `use: some-package` or `use: some-package/subpath` (resolved from the config file's folder exactly
 * as Node resolves an import written there: node_modules up the tree, the package's "exports").
 * Either way the module's `import … from 'llm-gateway'` gets the running gateway (core/plugin-hooks.ts).
 */
import { register } from 'node:module';
import { stat } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isPluginDefinition, type PluginDefinition } from './plugin.js';

const USE_PREFIX = 'llm-gateway-use:';
let hooked = false;

/** Installs the resolution hooks once per process (only a config with a plugin of its own needs them). */
function hooks(): boolean {
  if (!hooked && typeof register === 'function') {
    register('./plugin-hooks.js', import.meta.url, {
      data: { gatewayPackage: new URL('../../package.json', import.meta.url).href },
    });
    hooked = true;
  }
  return hooked;
}

/**
 * The file `use: <specifier>` names, resolved from the config file; throws Node's own error (what
 * it looked for and where) when there is none.
 */
export function resolvePluginPackage(specifier: string, configFile: string): string {
  if (!hooks()) throw new Error('this Node.js cannot resolve packages for plugins (node:module register): give a path instead');
  let url: string;
  try {
    url = import.meta.resolve(`${USE_PREFIX}${encodeURIComponent(pathToFileURL(configFile).href)}|${specifier}`);
  } catch (e) {
    throw readableResolutionError(e);
  }
  if (!url.startsWith('file:')) throw new Error(`'${specifier}' resolves to ${url}, not a file`);
  return fileURLToPath(url);
}

/**
 * Node's resolution error as Node words it. The error is made on the hooks thread and sometimes
 * reaches this one with its message lost: only its code and arguments, as
 * `ERR_PACKAGE_PATH_NOT_EXPORTED <package folder> <subpath> <base>` (seen on Node 20 in CI); the
 * sentence is put back so an operator reads the same reason either way.
 */
export function readableResolutionError(e: unknown): unknown {
  const m = /^ERR_PACKAGE_PATH_NOT_EXPORTED (\S+) (\S+) (\S+)$/.exec((e as Error)?.message ?? '');
  if (!m) return e;
  const [, pkg, subpath, base] = m;
  const err = new Error(
    subpath === '.'
      ? `No "exports" main defined in ${pkg}package.json imported from ${base}`
      : `Package subpath '${subpath}' is not defined by "exports" in ${pkg}package.json imported from ${base}`,
  );
  (err as Error & { code?: string }).code = 'ERR_PACKAGE_PATH_NOT_EXPORTED';
  return err;
}

/** Imports a plugin module and returns its definition (its default export, or `plugin`). */
export async function importPlugin(file: string): Promise<PluginDefinition<any>> {
  hooks();
  const info = await stat(file);
  // A query string busts the ESM cache so a reload picks up an edited plugin.
  const mod = await import(`${pathToFileURL(file).href}?v=${info.mtimeMs}`);
  const def = mod.default ?? mod.plugin;
  if (!isPluginDefinition(def)) throw new Error('its default export is not a plugin definition (name, schema, create)');
  return def;
}
