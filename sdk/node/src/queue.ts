import { finalize, type BatchOptions, type PendingEvent, type WireEvent } from './types.js';

/** The batch endpoint's limits per request. */
export const MAX_BATCH_EVENTS = 500;
export const MAX_BATCH_BYTES = 1024 * 1024;

/** Events taken from the queue for one request, already serialized. */
export interface Chunk {
  events: WireEvent[];
  /** The events as JSON, comma-separated: what goes between `"events":[` and `]`. */
  json: string;
}

const RESOLVED = Promise.resolve();

/**
 * A bounded FIFO of events with one sender. It sends when `flushAt` events are queued,
 * `flushInterval` ms after an event was queued, or on flush(). One request is in flight
 * at a time: events that arrive meanwhile make the next batch bigger (up to 500), which
 * keeps the request rate low (the rate limit counts requests) and the order stable.
 */
export class BatchQueue {
  private buffer: PendingEvent[] = [];
  /** Counters in events; the queue is FIFO, so "flushed up to n" is a single number. */
  private enqueued = 0;
  private taken = 0;
  private settled = 0;
  /** Send, regardless of flushAt, until `taken` reaches this. */
  private flushTarget = 0;
  private waiters: { target: number; resolve: () => void }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private pumping = false;
  private kickScheduled = false;
  private closed = false;

  constructor(
    private readonly opts: Required<BatchOptions>,
    /** Bytes a chunk's events may take: 1 MiB minus the request's envelope. */
    private readonly maxChunkBytes: number,
    /** Delivers one chunk; must not reject (the tracker reports and drops failures itself). */
    private readonly send: (chunk: Chunk) => Promise<void>,
  ) {}

  get length(): number {
    return this.buffer.length;
  }

  /** Hot path of every event() call in batch mode: keep it to a push and two comparisons. */
  offer(ev: PendingEvent): 'queued' | 'queue_full' | 'closed' {
    if (this.closed) return 'closed';
    if (this.buffer.length >= this.opts.maxQueueSize) return 'queue_full';
    this.buffer.push(ev);
    this.enqueued++;
    if (this.buffer.length >= this.opts.flushAt) this.kick();
    else if (this.timer === undefined) this.armTimer();
    return 'queued';
  }

  /** Resolves when every event queued before the call has been delivered or dropped. */
  flush(): Promise<void> {
    const target = this.enqueued;
    if (this.settled >= target) return RESOLVED;
    this.flushTarget = Math.max(this.flushTarget, target);
    const done = new Promise<void>((resolve) => this.waiters.push({ target, resolve }));
    this.kick();
    return done;
  }

  /** Stops accepting events; what is queued still goes out on flush(). */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private armTimer(): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flushTarget = Math.max(this.flushTarget, this.enqueued);
      void this.pump();
    }, this.opts.flushInterval);
    // An idle flush timer must never keep the process alive; beforeExit and flush() cover the rest.
    this.timer.unref();
  }

  /** Starts the sender on the next turn, so the event() call that fills a batch stays cheap. */
  private kick(): void {
    if (this.pumping || this.kickScheduled) return;
    this.kickScheduled = true;
    setImmediate(() => {
      this.kickScheduled = false;
      void this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.buffer.length > 0 && (this.buffer.length >= this.opts.flushAt || this.taken < this.flushTarget)) {
        const chunk = this.take();
        await this.send(chunk);
        this.settled += chunk.events.length;
        while (this.waiters.length > 0 && this.waiters[0]!.target <= this.settled) this.waiters.shift()!.resolve();
      }
    } finally {
      this.pumping = false;
    }
    // Fewer than flushAt left: the timer sends them.
    if (this.buffer.length > 0 && this.timer === undefined && !this.closed) this.armTimer();
  }

  /** Takes the oldest events that fit in one request: at most 500 and the byte budget (always at least one). */
  private take(): Chunk {
    const parts: string[] = [];
    let bytes = 0;
    let n = 0;
    while (n < this.buffer.length && n < MAX_BATCH_EVENTS) {
      const json = JSON.stringify(finalize(this.buffer[n]!));
      const size = Buffer.byteLength(json) + 1; // + the comma
      if (n > 0 && bytes + size > this.maxChunkBytes) break;
      parts.push(json);
      bytes += size;
      n++;
    }
    this.taken += n;
    return { events: this.buffer.splice(0, n) as WireEvent[], json: parts.join(',') };
  }
}
