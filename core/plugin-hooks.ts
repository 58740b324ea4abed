/**
 * Module resolution hooks (node:module `register`), installed by core/plugin-modules.ts the first
 * time a gateway loads a plugin from outside the gateway. They run on Node's hooks thread, so this
 * file imports nothing of the gateway. Two things:
 *
 * - `llm-gateway` and `llm-gateway/…` resolve to the running gateway's own package (as the gateway's
 *   own files would import it), whatever imports them: a plugin declares the gateway as a peer and
 *   runs inside the gateway that loads it — a deployment has no `node_modules/llm-gateway` (the
 *   gateway is the root package), and the registry's package of that name is someone else's.
 * - `llm-gateway-use:<parent URL, URI-encoded>|<specifier>` resolves `<specifier>` as an import written in
 *   `<parent URL>` (the config file) would be: how `use: <package>` finds a plugin, the way Node does.
 */

/** The prefix of a `use:` lookup (core/plugin-modules.ts builds the specifiers). */
export const USE_PREFIX = 'llm-gateway-use:';

let gatewayPackage: string | undefined;

export function initialize(data: { gatewayPackage: string }): void {
  gatewayPackage = data.gatewayPackage;
}

interface ResolveContext {
  parentURL?: string;
  conditions: string[];
  importAttributes?: Record<string, string>;
}
type NextResolve = (specifier: string, context?: Partial<ResolveContext>) => Promise<{ url: string }>;

export async function resolve(specifier: string, context: ResolveContext, next: NextResolve): Promise<{ url: string }> {
  if (specifier.startsWith(USE_PREFIX)) {
    const rest = specifier.slice(USE_PREFIX.length);
    const bar = rest.indexOf('|');
    return next(rest.slice(bar + 1), { ...context, parentURL: decodeURIComponent(rest.slice(0, bar)) });
  }
  // Resolved from the gateway's package.json: Node's self-reference through its "exports".
  if (gatewayPackage && (specifier === 'llm-gateway' || specifier.startsWith('llm-gateway/')))
    return next(specifier, { ...context, parentURL: gatewayPackage });
  return next(specifier, context);
}
