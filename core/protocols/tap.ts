import type { Usage } from '../money.js';
import type { SseBlock } from '../sse.js';
import type { StreamMeta, StreamTap } from './types.js';

/** What every passthrough tap tracks; each protocol's wire says how its events move it. */
export abstract class BaseTap implements StreamTap {
  usage: Usage | undefined;
  complete = false;
  errored = false;
  started = false;
  outputChars = 0;
  meta: StreamMeta = {};

  abstract observe(b: SseBlock): boolean;

  closing(_estimate: () => Usage): string {
    return '';
  }
}
