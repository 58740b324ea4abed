/**
 * The types every layer shares: the request's parsed body, the model it resolved to, one upstream
 * attempt, the route, how a request ended, a stream frame and a plugin's state slot.
 *
 * A leaf: this module holds types only and imports only types, from modules that never import it
 * back, so any room (context, billing, routing, metrics, plugins, the upstream path) can depend on
 * it without closing an import cycle. Behaviour lives in the modules that use these types.
 */
import type { GatewayError } from './errors.js';
import type { AccountConfig, ModelConfig, ProtocolName, ProviderConfig, RouteConfig } from './config/types.js';
import type { Conversion } from './protocols/types.js';
import type { LargeBody } from './json/parse.js';

/** A typed per-request state slot of a plugin (`createSlot<T>(name)` in core/context.ts). */
export interface Slot<T> {
  readonly name: string;
  readonly __type?: T;
}

export interface ParsedBody {
  /**
   * The body as received (UTF-8). For a large body this string is a concatenation of the pieces it
   * was decoded in: its length is free, reading its characters copies the whole body at once
   * (`large` has the pieces).
   */
  text: string;
  json: Record<string, unknown>;
  model: string;
  stream: boolean;
  /** The `models` fallback list (without `model`), as sent. */
  fallback: string[];
  /** The body's size in bytes (its UTF-8 length; measured from `text` when absent). */
  bytes?: number;
  /** A body over the large-body size: its text as pieces, its top-level members, its long strings (core/json). */
  large?: LargeBody;
}

export interface ResolvedModel {
  model: ModelConfig;
  provider: ProviderConfig;
}

/** One try against one upstream (the fallback list may make several). */
export interface Attempt {
  readonly index: number;
  readonly model: ModelConfig;
  readonly provider: ProviderConfig;
  /** The provider account this attempt goes to (core/pool chose it). */
  readonly account?: AccountConfig;
  /** The protocol spoken to the upstream. */
  readonly upstreamProtocol: ProtocolName;
  /**
   * The client's body as it will be encoded for this attempt (initially the request as received);
   * a plugin may replace it in onAttempt (body-rewriter).
   */
  request: { text: string; json: Record<string, unknown>; large?: LargeBody };
  /** Set by the core for passthrough, by the converter plugin otherwise. */
  conversion?: Conversion;
  /** Extra upstream request headers plugins want sent. */
  readonly headers: Record<string, string>;
  /** Upstream status and headers, once received. */
  status?: number;
  responseHeaders?: Record<string, string | string[] | undefined>;
  /** The mapped failure of this attempt (status ≥ 400, connection error, timeout). */
  error?: GatewayError;
  /**
   * How it failed: an upstream status, no connection (or cut off, or unreadable), a timeout, or an
   * error event the upstream streamed before anything reached the client (`error` says which).
   */
  failure?: 'status' | 'connect' | 'timeout' | 'event';
  /** Set by a plugin in onResponse: discard this attempt and try the next model. */
  retry: boolean;
}

export interface RouteInfo extends RouteConfig {
  /** Label for metrics and logs. */
  readonly name: string;
}

/** How a request ended, given to onFinally. */
export interface Outcome {
  /** The status the client received (or 499 when it went away before any response). */
  status: number;
  error?: GatewayError;
  /** Bytes were written to the client before the end. */
  committed: boolean;
  /** The client disconnected before the response completed. */
  clientAborted: boolean;
}

/** A frame about to be written to the client stream (already in the client's protocol). */
export interface StreamFrame {
  event?: string;
  data: string;
}
