/**
 * Which models a group serves, which endpoints it answers, and which protocol an attempt speaks
 * upstream. Pure functions of the frozen config: cheap enough for every request.
 */
import type { GatewayConfig, GroupConfig, GroupKind, ProtocolName, RouteHandler } from './config/types.js';
import type { ResolvedModel } from './types.js';

/** Models a group serves: its list, or every configured model when it lists none. */
export function groupModels(config: GatewayConfig, group: GroupConfig | undefined): string[] {
  if (group && group.models.length > 0) return [...group.models];
  return Object.keys(config.models);
}

/**
 * Resolves a client's model name within the group: an exact id, or `<provider>/<model>` naming a
 * served model of that provider by id or upstream name. Undefined when the group does not serve it.
 */
export function resolveModel(config: GatewayConfig, group: GroupConfig | undefined, name: string): ResolvedModel | undefined {
  const served = group && group.models.length > 0 ? group.models : undefined;
  const isServed = (id: string) => (served ? served.includes(id) : Object.prototype.hasOwnProperty.call(config.models, id));
  if (Object.prototype.hasOwnProperty.call(config.models, name) && isServed(name)) {
    const model = config.models[name];
    return { model, provider: config.providers[model.provider] };
  }
  const slash = name.indexOf('/');
  if (slash > 0) {
    const providerName = name.slice(0, slash);
    const rest = name.slice(slash + 1);
    if (Object.prototype.hasOwnProperty.call(config.providers, providerName)) {
      for (const id of served ?? Object.keys(config.models)) {
        const model = config.models[id];
        if (model && model.provider === providerName && (model.id === rest || model.upstream === rest)) {
          return { model, provider: config.providers[providerName] };
        }
      }
    }
  }
  return undefined;
}

/** The protocols a group kind serves natively, preferred first. */
export function nativeProtocols(kind: GroupKind): readonly ProtocolName[] {
  switch (kind) {
    case 'chat':
      return ['openai-chat'];
    case 'messages':
      return ['anthropic-messages'];
    case 'responses':
      return ['openai-responses', 'openai-chat'];
  }
}

export type EndpointAccess = 'ok' | 'not_found' | 'forbidden';

/** The group-to-endpoint matrix of spec §4. */
export function endpointAccess(group: GroupConfig, protocol: ProtocolName | undefined, handler: RouteHandler | undefined): EndpointAccess {
  if (handler === 'models' || handler === 'usage') return 'ok';
  if (handler === 'count-tokens') return group.kind === 'messages' ? 'ok' : 'not_found';
  switch (protocol) {
    case 'openai-chat':
      return 'ok';
    case 'anthropic-messages':
      if (group.kind === 'chat') return 'not_found';
      if (group.kind === 'responses' && !group.allowMessages) return 'forbidden';
      return 'ok';
    case 'openai-responses':
      return group.kind === 'chat' ? 'not_found' : 'ok';
    default:
      return 'ok';
  }
}

/**
 * The protocol an attempt speaks upstream: the client's own when the group serves it natively and
 * the provider has it; else the group's preferred native protocol the provider has; else whatever
 * the provider speaks (the converter bridges the difference).
 */
export function upstreamProtocol(client: ProtocolName, group: GroupConfig | undefined, provides: readonly ProtocolName[]): ProtocolName {
  const native = group ? nativeProtocols(group.kind) : [client];
  if (native.includes(client) && provides.includes(client)) return client;
  for (const p of native) if (provides.includes(p)) return p;
  if (provides.includes(client)) return client;
  return provides[0];
}
