/**
 * Block serialisation for encoders whose clients expect one content block (or output item) at a
 * time. The IR lets tool_call blocks overlap (Chat streams parallel calls by index and never says
 * when one call is done, so its decoder closes them all at `finish`); Anthropic and Responses
 * clients expect `start → deltas → stop` of one block before the next starts. The serializer
 * passes the first open block through live and queues the events of blocks that start while it is
 * open, releasing them — in start order — when it stops. `finish`, `end` and `error` flush the
 * queue first, so nothing is lost or reordered across blocks.
 */
import type { IRStreamEvent } from '../ir.js';

interface Pending {
  index: number;
  events: IRStreamEvent[];
  stopped: boolean;
}

export class BlockSerializer {
  private active: number | undefined;
  private pending: Pending[] = [];

  push(ev: IRStreamEvent): IRStreamEvent[] {
    switch (ev.type) {
      case 'block_start':
        if (this.active === undefined && this.pending.length === 0) {
          this.active = ev.index;
          return [ev];
        }
        this.pending.push({ index: ev.index, events: [ev], stopped: false });
        return [];
      case 'delta':
      case 'block_stop': {
        if (ev.index === this.active) {
          if (ev.type !== 'block_stop') return [ev];
          this.active = undefined;
          return [ev, ...this.drain()];
        }
        const p = this.pending.find((x) => x.index === ev.index);
        if (!p) return [ev];
        p.events.push(ev);
        if (ev.type === 'block_stop') p.stopped = true;
        return [];
      }
      case 'finish':
      case 'end':
      case 'error': {
        const out = this.drain();
        for (const p of this.pending) out.push(...p.events);
        this.pending = [];
        out.push(ev);
        return out;
      }
      default:
        return [ev];
    }
  }

  /** Releases queued blocks while nothing is open. */
  private drain(): IRStreamEvent[] {
    const out: IRStreamEvent[] = [];
    while (this.active === undefined && this.pending.length > 0) {
      const p = this.pending.shift()!;
      out.push(...p.events);
      if (!p.stopped) this.active = p.index;
    }
    return out;
  }
}
