import { finalize, isIdentify, type BatchOptions, type QueueItem, type WireEvent, type WireIdentify } from './types.js';

/** The batch endpoint's default limits per request (a server may be set lower: see Tracker). */
export const MAX_BATCH_EVENTS = 500;
export const MAX_BATCH_BYTES = 1024 * 1024;

/** Events taken from the queue for one request to /track/batch, already serialized. */
export interface EventChunk {
  events: WireEvent[];
  /** Each event as JSON: what goes, comma-separated, between `"events":[` and `]`. */
  parts: string[];
  /**
   * The request body, when it was prepared ahead (see BatchQueue.pump), and when (ms since
   * epoch): its `sent_at`. It serves the first attempt only while that is recent.
   */
  prepared?: { at: number; body: Promise<{ body: string | Uint8Array; gzipped: boolean }> } | undefined;
}

/** An identify call taken from the queue: never part of a batch body, always a request of its own. */
export interface IdentifyChunk {
  identify: WireIdentify;
}

export type Chunk = EventChunk | IdentifyChunk;

/** Queue items a chunk settles: the counters count identify calls as events. */
function itemCount(chunk: Chunk): number {
  return 'identify' in chunk ? 1 : chunk.events.length;
}

/** UTF-8 length of a string (no allocation). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      n += 2; // a surrogate pair: 4 bytes for 2 code units
      i++;
    } else n += 2;
  }
  return n;
}

type Timer = ReturnType<typeof setTimeout>;

/** A timer that never keeps the process alive (Node, Bun: unref(); Deno: Deno.unrefTimer). */
export function unrefTimer(timer: Timer): void {
  if (typeof timer === 'object' && timer !== null && typeof (timer as { unref?: unknown }).unref === 'function') {
    (timer as { unref(): void }).unref();
    return;
  }
  const deno = (globalThis as { Deno?: { unrefTimer?: (id: number) => void } }).Deno;
  if (typeof timer === 'number' && typeof deno?.unrefTimer === 'function') deno.unrefTimer(timer);
}

const RESOLVED = Promise.resolve();

/**
 * A bounded FIFO of events (and identify calls) with one sender. It sends when `flushAt`
 * events are queued, `flushInterval` ms after an event was queued, or on flush(). One
 * request is in flight at a time: events that arrive meanwhile make the next batch bigger
 * (up to 500), which keeps the request rate low (the rate limit counts requests) and the
 * order stable. An identify call is a request of its own, in its place in that order.
 */
export class BatchQueue {
  private buffer: QueueItem[] = [];
  /** Counters in events; the queue is FIFO, so "flushed up to n" is a single number. */
  private enqueued = 0;
  private taken = 0;
  private settled = 0;
  /** Send, regardless of flushAt, until `taken` reaches this. */
  private flushTarget = 0;
  private waiters: { target: number; resolve: () => void }[] = [];
  private timer: Timer | undefined;
  /** Per-request limits: the endpoint's defaults, lowered when a server answers 413 or "too many events". */
  private maxEvents = MAX_BATCH_EVENTS;
  private maxBytes: number;
  private pumping = false;
  private kickScheduled = false;
  private closed = false;

  constructor(
    private readonly opts: Required<BatchOptions>,
    /** Bytes of a request other than its events: the envelope. */
    private readonly envelopeBytes: number,
    /** Delivers one chunk; must not reject (the tracker reports and drops failures itself). */
    private readonly send: (chunk: Chunk) => Promise<void>,
    /** Starts building a chunk's request body (gzip included) while another request is in flight. */
    private readonly prepare: (chunk: EventChunk) => void = () => {},
  ) {
    this.maxBytes = MAX_BATCH_BYTES;
  }

  /** Lowers the per-request limits for every later chunk (never below one event). */
  lowerLimits(events: number, bodyBytes: number): void {
    this.maxEvents = Math.max(1, Math.min(this.maxEvents, events));
    this.maxBytes = Math.max(1, Math.min(this.maxBytes, bodyBytes));
  }

  get limits(): { events: number; bytes: number } {
    return { events: this.maxEvents, bytes: this.maxBytes };
  }

  get length(): number {
    return this.buffer.length;
  }

  /** Hot path of every event() call in batch mode: keep it to a push and two comparisons. */
  offer(ev: QueueItem): 'queued' | 'queue_full' | 'closed' {
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
    unrefTimer(this.timer);
  }

  /** Starts the sender on the next turn, so the event() call that fills a batch stays cheap. */
  private kick(): void {
    if (this.pumping || this.kickScheduled) return;
    this.kickScheduled = true;
    queueMicrotask(() => {
      this.kickScheduled = false;
      void this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      let next: Chunk | undefined;
      for (;;) {
        const chunk = next ?? (this.due() ? this.take() : undefined);
        next = undefined;
        if (chunk === undefined) break;
        const sent = this.send(chunk);
        // While it is in flight, a full next batch is serialized and gzipped, so that it goes
        // out as soon as the answer comes: under load the round trip, not the encoding, paces
        // the sender. Only a full one: a partial batch would rather grow until then.
        if (this.buffer.length >= this.maxEvents) {
          next = this.take();
          if (!('identify' in next)) this.prepare(next);
        }
        await sent;
        this.settled += itemCount(chunk);
        while (this.waiters.length > 0 && this.waiters[0]!.target <= this.settled) this.waiters.shift()!.resolve();
      }
    } finally {
      this.pumping = false;
    }
    // Fewer than flushAt left: the timer sends them.
    if (this.buffer.length > 0 && this.timer === undefined && !this.closed) this.armTimer();
  }

  /** Whether queued events should go now: flushAt reached, or a flush() asked for them. */
  private due(): boolean {
    return this.buffer.length > 0 && (this.buffer.length >= this.opts.flushAt || this.taken < this.flushTarget);
  }

  /**
   * Takes the oldest events that fit in one request: the event and byte limits (always at
   * least one), up to the next identify call. An identify call at the head goes alone.
   */
  private take(): Chunk {
    const head = this.buffer[0]!;
    if (isIdentify(head)) {
      this.buffer.shift();
      this.taken++;
      return { identify: head };
    }
    const parts: string[] = [];
    const budget = this.maxBytes - this.envelopeBytes;
    // Each UTF-16 unit is at most 3 UTF-8 bytes: bytes are counted exactly only once that
    // bound could break the budget (with the default 1 MiB and 500 events it rarely does).
    let exact = false;
    let bytes = 0;
    let n = 0;
    while (n < this.buffer.length && n < this.maxEvents) {
      const item = this.buffer[n]!;
      if (isIdentify(item)) break;
      const json = JSON.stringify(finalize(item));
      if (!exact && bytes + json.length * 3 + 1 > budget) {
        exact = true;
        bytes = 0;
        for (const p of parts) bytes += utf8Length(p) + 1;
      }
      const size = (exact ? utf8Length(json) : json.length * 3) + 1; // + the comma
      if (exact && n > 0 && bytes + size > budget) break;
      parts.push(json);
      bytes += size;
      n++;
    }
    this.taken += n;
    return { events: this.buffer.splice(0, n) as WireEvent[], parts };
  }
}
