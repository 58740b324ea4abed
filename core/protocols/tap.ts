import type { Usage } from '../money.js';
import type { SseBytesBlock } from '../sse.js';
import type { StreamMeta, StreamTap } from './types.js';

/** What every passthrough tap tracks; each protocol's wire says how its events move it. */
export abstract class BaseTap implements StreamTap {
  usage: Usage | undefined;
  complete = false;
  errored = false;
  started = false;
  outputChars = 0;
  finishReasons: string[] | undefined = undefined;
  protected m: StreamMeta = {};

  get meta(): StreamMeta {
    return this.m;
  }

  abstract observe(b: SseBytesBlock): boolean;

  closing(_estimate: () => Usage): string | Buffer {
    return '';
  }
}
