/** The hand-written registry of built-in plugins: the YAML `use:` name → its definition. */
import type { PluginDefinition, PluginRegistry } from '../core/plugin.js';
import auth from './auth/index.js';
import ipFilter from './ip-filter/index.js';
import quota from './quota/index.js';
import windows from './windows/index.js';
import rpm from './rpm/index.js';
import concurrency from './concurrency/index.js';
import bodyRewriter from './body-rewriter/index.js';
import converter from './converter/index.js';
import fallback from './fallback/index.js';
import metering from './metering/index.js';

const all: PluginDefinition<any>[] = [auth, ipFilter, quota, windows, rpm, concurrency, bodyRewriter, converter, fallback, metering];

export const builtinPlugins: PluginRegistry = new Map(all.map((p) => [p.name, p]));
