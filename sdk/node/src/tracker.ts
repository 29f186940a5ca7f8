import { describeDetails, TrackerError, type ServerErrorDetails } from './errors.js';
import { webPlatform, type Platform } from './platform.js';
import { BatchQueue, unrefTimer, utf8Length, type EventChunk } from './queue.js';
import { httpError, Transport, type Answer } from './transport.js';
import {
  finalize,
  isIdentify,
  type DropReason,
  type EventProperties,
  type FetchFunction,
  type IdentifyOptions,
  type Payload,
  type PendingEvent,
  type QueueItem,
  type TrackerOptions,
  type TrackerStats,
  type Traits,
  type WireEvent,
  type WireIdentify,
} from './types.js';
import { buildEvent, buildIdentify, resolveOptions, unknownFields, unknownIdentifyOptions, type ResolvedOptions } from './validate.js';

const RESOLVED = Promise.resolve();

/** Default for shutdown(): long enough for one slow request and a retry. */
const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10_000;

/** Longest delay setTimeout accepts; a longer wait is no wait limit at all. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A batch body gzipped ahead, while the previous request was in flight, goes out only
 * while its `sent_at` is at most this old (ms); an older one is made again, so that the
 * server's clock correction is off by at most this much.
 */
const PREPARED_MAX_AGE_MS = 1000;

/** `sent_at` of an attempt made now: this process's clock, as `timestamp`. */
function sentAtNow(): string {
  return new Date(Date.now()).toISOString();
}

/** Node's process, where there is one (Node, Bun, Deno): only for the beforeExit hook. */
interface ProcessLike {
  on(event: 'beforeExit', listener: () => void): unknown;
  off(event: 'beforeExit', listener: () => void): unknown;
}

function processWithEvents(): ProcessLike | undefined {
  const p = (globalThis as { process?: Partial<ProcessLike> }).process;
  return typeof p?.on === 'function' && typeof p.off === 'function' ? (p as ProcessLike) : undefined;
}

/** What inspect() and JSON.stringify() show of a tracker: never the API key. */
interface TrackerSummary {
  analyticsHost: string;
  siteId: string | number;
  apiKey: string;
  disabled: boolean;
  batch: ResolvedOptions['batch'] | false;
  stats: TrackerStats;
}

/**
 * Sends pageviews, custom events and identify calls to a Rivulet ingest server.
 *
 * Without `batch`, every call is one `POST {analyticsHost}/track` (or `/identify`) and its
 * promise settles when the server has answered (or retries are used up). With `batch`,
 * calls only queue the event and resolve at once; batches go to
 * `POST {analyticsHost}/track/batch`, and each queued identify call, in its turn, to
 * `POST {analyticsHost}/identify` on its own.
 */
export class Tracker {
  // Private fields (#): they hold the API key, and util.inspect never shows them.
  readonly #options: ResolvedOptions;
  readonly #platform: Platform;
  /** Debug log sink; undefined unless `debug` is on. */
  readonly #log: ((line: string) => void) | undefined;
  readonly #transport: Transport | undefined;
  readonly #closing = new AbortController();
  readonly #trackUrl: string;
  readonly #batchUrl: string;
  readonly #identifyUrl: string;
  /** `{"api_key":…,"site_id":…,"sent_at":`: the part of every batch body that never changes. */
  readonly #batchPrefix: string;
  readonly #queue: BatchQueue | undefined;
  /** Single mode: requests not finished yet, for flush(). Their promises never reject. */
  readonly #inFlightRequests = new Set<Promise<void>>();
  #inFlightEvents = 0;
  #delivered = 0;
  #failed = 0;
  /** Queue-full is reported to onError once per episode (until the queue drains to half), not once per event. */
  #queueFullEpisode = false;
  #shutdownPromise: Promise<void> | undefined;
  readonly #process: ProcessLike | undefined;
  readonly #onBeforeExit = (): void => {
    if (this.#queue !== undefined && this.#queue.length > 0) void this.flush();
  };

  /** @param platform the runtime's crypto and gzip; the "node" entry point passes Node's. */
  constructor(options: TrackerOptions, platform?: Platform) {
    this.#options = resolveOptions(options);
    const o = this.#options;
    const p = platform ?? webPlatform();
    if (p === undefined) {
      throw new TrackerError('rivulet-node: this runtime has no Web Crypto (globalThis.crypto), which the tracker needs for event ids', {
        code: 'invalid_options',
      });
    }
    this.#platform = p;
    // Read console.log at call time so that a replaced console is honoured.
    this.#log = o.debug ? (line) => console.log(line) : undefined;
    this.#trackUrl = `${o.analyticsHost}/track`;
    this.#batchUrl = `${o.analyticsHost}/track/batch`;
    this.#identifyUrl = `${o.analyticsHost}/identify`;
    this.#batchPrefix = `{"api_key":${JSON.stringify(o.apiKey)},"site_id":${JSON.stringify(o.siteId)},"sent_at":`;
    if (o.disabled) {
      this.#transport = undefined;
      this.#queue = undefined;
      this.#process = undefined;
      return;
    }
    const fetchFn = o.fetch ?? (globalThis as { fetch?: FetchFunction }).fetch;
    if (typeof fetchFn !== 'function') {
      throw new TrackerError('rivulet-node: this runtime has no global fetch; pass one as the "fetch" option', {
        code: 'invalid_options',
      });
    }
    this.#transport = new Transport(
      {
        timeoutMs: o.timeoutMs,
        retryBaseDelayMs: o.retryBaseDelayMs,
        retryMaxDelayMs: o.retryMaxDelayMs,
        apiKey: o.apiKey,
        // The global one is looked up at each request, so that one patched later (tests, instrumentation) is used.
        fetch: o.fetch ?? ((url, init) => ((globalThis as { fetch?: FetchFunction }).fetch ?? fetchFn)(url, init)),
        log: this.#log,
      },
      this.#closing.signal,
    );
    if (o.batch) {
      // The prefix, the quoted sent_at (`"2026-01-02T03:04:05.678Z"`, 26), `,"events":[` (11) and `]}` (2).
      const envelope = utf8Length(this.#batchPrefix) + 26 + 11 + 2;
      this.#queue = new BatchQueue(
        o.batch,
        envelope,
        (chunk) => ('identify' in chunk ? this.#sendQueuedIdentify(chunk.identify) : this.#sendBatch(chunk)),
        (chunk) => {
          const at = Date.now();
          chunk.prepared = { at, body: this.#encode(this.#batchBody(chunk.parts, new Date(at).toISOString())) };
        },
      );
      // The flush timer never keeps the process alive, so a process that ends naturally
      // would lose the queue: beforeExit (Node, Bun, Deno; not on process.exit() or
      // signals) sends it first. Other runtimes have no such hook: see flush().
      this.#process = processWithEvents();
      this.#process?.on('beforeExit', this.#onBeforeExit);
    } else {
      this.#queue = undefined;
      this.#process = undefined;
    }
  }

  /** Records a pageview. `payload` gives its context (`Payload`). */
  pageview(payload?: Payload): Promise<void> {
    return this.#track('pageview', undefined, payload, undefined);
  }

  /** Records a custom event named `eventName`, with optional context and event-specific properties. */
  event(eventName: string, payload?: Payload, properties?: EventProperties): Promise<void> {
    return this.#track('custom_event', eventName, payload, properties);
  }

  /**
   * Tells the server who `userId` is: `traits` are merged into the user's traits (a trait
   * set to `null` is removed), and `options.anonymousId`, the id the user had before
   * logging in, becomes an alias of `userId` (unless another user claimed it first).
   * Delivered like an event (queued in batch mode, retried with the same `event_id` and
   * `timestamp`), but always as a request of its own to `POST {analyticsHost}/identify`.
   */
  identify(userId: string, traits?: Traits, options?: IdentifyOptions): Promise<void> {
    let call: WireIdentify;
    try {
      call = buildIdentify(userId, traits, options, this.#platform.randomUUID);
    } catch (e) {
      return this.#fail(e as TrackerError);
    }
    if (this.#log !== undefined) {
      const ignored = unknownIdentifyOptions(options);
      if (ignored.length > 0) this.#log(`[rivulet] not sent, unknown identify options: ${ignored.join(', ')}`);
    }
    if (this.#options.disabled) return RESOLVED;
    if (this.#queue !== undefined) return this.#enqueue(this.#queue, call);
    const body = this.#identifyBody(call);
    return this.#sendAlone(call, this.#identifyUrl, () => body);
  }

  /**
   * Resolves when every event tracked before the call has been delivered or given up on
   * (reported to onError / onDrop), or when `timeoutMs` has passed, whichever comes first:
   * with `true` if everything was settled, `false` on timeout (events still pending go on
   * being sent). Never rejects. Await it before a serverless function returns.
   */
  flush(timeoutMs?: number): Promise<boolean> {
    let drained: Promise<void>;
    if (this.#queue !== undefined) drained = this.#queue.flush();
    else if (this.#inFlightRequests.size === 0) return Promise.resolve(true);
    else drained = Promise.all([...this.#inFlightRequests]).then(() => undefined);
    const limit = this.#timeout(timeoutMs, 'flush');
    if (limit === undefined) return drained.then(() => true);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), limit);
      unrefTimer(timer);
      void drained.then(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /**
   * Stops accepting events and delivers what is queued or in flight, for at most
   * `timeoutMs` (default 10000; `Infinity` waits as long as it takes). After that,
   * requests are cut off and their events dropped with reason "shutdown". Never rejects;
   * calling it again returns the same promise.
   */
  shutdown(timeoutMs: number = DEFAULT_SHUTDOWN_TIMEOUT_MS): Promise<void> {
    if (this.#shutdownPromise !== undefined) return this.#shutdownPromise;
    const limit = this.#timeout(timeoutMs, 'shutdown');
    this.#process?.off('beforeExit', this.#onBeforeExit);
    this.#queue?.close();
    const drained = this.flush();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((resolve) => {
      if (limit === undefined) return;
      timer = setTimeout(() => {
        this.#closing.abort();
        resolve();
      }, limit);
      unrefTimer(timer);
    });
    this.#shutdownPromise = Promise.race([drained, deadline])
      // After an abort, what remains fails fast; wait for it so every drop is reported.
      .then(() => this.flush())
      .then(() => undefined)
      .finally(() => clearTimeout(timer));
    return this.#shutdownPromise;
  }

  /** Counters for monitoring. */
  stats(): TrackerStats {
    return {
      queued: this.#queue?.length ?? 0,
      inFlight: this.#inFlightEvents,
      delivered: this.#delivered,
      failed: this.#failed,
    };
  }

  /** What JSON.stringify shows: the configuration without the API key, and the counters. */
  toJSON(): TrackerSummary {
    const o = this.#options;
    return {
      analyticsHost: o.analyticsHost,
      siteId: o.siteId,
      apiKey: o.apiKey === '' ? '' : 'rb_[REDACTED]',
      disabled: o.disabled,
      batch: o.batch ?? false,
      stats: this.stats(),
    };
  }

  /** util.inspect / console.log of a tracker: the same summary as toJSON(). */
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `Tracker ${JSON.stringify(this.toJSON())}`;
  }

  /**
   * A timeout argument as a timer delay: undefined for "no limit" (Infinity, or beyond
   * what timers take). NaN, negative or non-numbers fall back to the default and are reported.
   */
  #timeout(ms: unknown, call: 'flush' | 'shutdown'): number | undefined {
    if (ms === undefined) return call === 'flush' ? undefined : DEFAULT_SHUTDOWN_TIMEOUT_MS;
    if (typeof ms === 'number' && ms >= 0) return ms > MAX_TIMER_MS ? undefined : ms;
    const fallback = call === 'flush' ? undefined : DEFAULT_SHUTDOWN_TIMEOUT_MS;
    this.#report(
      new TrackerError(
        `rivulet-node: ${call}(timeoutMs) needs a number >= 0 or Infinity (got ${String(ms)}); using ${fallback === undefined ? 'no limit' : `${fallback} ms`}`,
        { code: 'invalid_options' },
      ),
    );
    return fallback;
  }

  #track(
    type: 'pageview' | 'custom_event',
    eventName: string | undefined,
    payload: Payload | undefined,
    properties: EventProperties | undefined,
  ): Promise<void> {
    let ev: PendingEvent;
    try {
      ev = buildEvent(type, eventName, payload, properties, this.#platform.randomUUID);
    } catch (e) {
      return this.#fail(e as TrackerError);
    }
    if (this.#log !== undefined) {
      const ignored = unknownFields(payload);
      if (ignored.length > 0) this.#log(`[rivulet] not sent, unknown payload fields: ${ignored.join(', ')}`);
    }
    if (this.#options.disabled) return RESOLVED;
    return this.#queue !== undefined ? this.#enqueue(this.#queue, ev) : this.#sendOne(ev);
  }

  #enqueue(queue: BatchQueue, ev: QueueItem): Promise<void> {
    const outcome = queue.offer(ev);
    if (outcome === 'queued') {
      if (this.#queueFullEpisode && queue.length <= (this.#options.batch?.maxQueueSize ?? 0) / 2) this.#queueFullEpisode = false;
      return RESOLVED;
    }
    this.#failed++;
    if (outcome === 'closed') {
      this.#drop(ev, 'shutdown');
      return this.#fail(afterShutdownError(ev));
    }
    this.#drop(ev, 'queue_full');
    // Building an Error costs microseconds: only do it when someone will see it.
    if (!this.#options.throwOnError && this.#queueFullEpisode) return RESOLVED;
    const err = new TrackerError(
      `rivulet-node: batch queue full (${queue.length} events); dropping new events until it drains - is the server reachable?`,
      { code: 'queue_full', retryable: true, eventIds: [ev.event_id] },
    );
    if (this.#options.throwOnError) return Promise.reject(err);
    this.#queueFullEpisode = true;
    this.#report(err);
    return RESOLVED;
  }

  /** One event to /track: `sent_at` is the time of each attempt, the rest the same bytes every time. */
  #sendOne(ev: PendingEvent): Promise<void> {
    const head = JSON.stringify({ api_key: this.#options.apiKey, site_id: this.#options.siteId, ...finalize(ev) });
    return this.#sendAlone(ev, this.#trackUrl, (sentAt) => `${head.slice(0, -1)},"sent_at":${JSON.stringify(sentAt)}}`);
  }

  /** The body of POST /identify: the key stays in the body, as for events (no Authorization header). */
  #identifyBody(call: WireIdentify): string {
    const { apiKey, siteId } = this.#options;
    // Field by field: `type` only tells identify calls from events in onDrop, it is not sent.
    return JSON.stringify({
      api_key: apiKey,
      site_id: siteId,
      user_id: call.user_id,
      anonymous_id: call.anonymous_id,
      traits: call.traits,
      event_id: call.event_id,
      timestamp: call.timestamp,
    });
  }

  /**
   * Single mode: one request for one event or identify call; the promise settles with its
   * outcome. `body` makes an attempt's body from its `sent_at`.
   */
  #sendAlone(item: QueueItem, url: string, body: (sentAt: string) => string): Promise<void> {
    if (this.#closing.signal.aborted || this.#shutdownPromise !== undefined) {
      this.#failed++;
      return this.#fail(afterShutdownError(item));
    }
    this.#inFlightEvents++;
    const result = this.#post(url, body, [item.event_id], false).then(
      () => {
        this.#delivered++;
      },
      (e: unknown) => {
        this.#failed++;
        throw e;
      },
    );
    const settled = result.then(
      () => undefined,
      () => undefined,
    );
    this.#inFlightRequests.add(settled);
    void settled.then(() => {
      this.#inFlightRequests.delete(settled);
      this.#inFlightEvents--;
    });
    return result.catch((e: unknown) => this.#fail(e as TrackerError));
  }

  /**
   * POSTs one body (an event to /track, or an identify call), retried (network errors,
   * timeouts, 408, 429, 5xx) up to maxRetries. `body` makes each attempt's from its time,
   * the event's `sent_at`; the rest (event_id, timestamp) is the same on every attempt.
   * `patientOn429`: a 429 waits without using up retries, as batches do (see #deliver).
   */
  async #post(url: string, body: (sentAt: string) => string, ids: string[], patientOn429: boolean): Promise<void> {
    const transport = this.#transport!;
    await transport.waitForPause(ids);
    let failures = 0;
    let rateLimited = 0;
    for (let attempt = 1; ; attempt++) {
      let error: TrackerError;
      try {
        const answer = await transport.attempt(url, body(sentAtNow()), false, attempt, ids);
        if (answer.status === 200) return;
        error = httpError(url, answer, attempt, ids, (t) => transport.redact(t));
        if (answer.retryAfterMs !== undefined && error.retryable) transport.pause(answer.retryAfterMs);
        if (patientOn429 && answer.status === 429) {
          rateLimited++;
          await transport.backoff(Math.min(rateLimited, 30), ids, error);
          continue;
        }
      } catch (e) {
        if (!(e instanceof TrackerError)) throw e;
        error = e;
      }
      if (!error.retryable || failures >= this.#options.maxRetries) throw error;
      failures++;
      await transport.backoff(failures, ids, error);
    }
  }

  /**
   * Batch mode: delivers an identify call taken from the queue, alone, and reports its
   * outcome like a batched event's. Never rejects.
   */
  async #sendQueuedIdentify(call: WireIdentify): Promise<void> {
    this.#inFlightEvents++;
    try {
      const body = this.#identifyBody(call);
      await this.#post(this.#identifyUrl, () => body, [call.event_id], true);
      this.#delivered++;
    } catch (e) {
      const err = e instanceof TrackerError ? e : unexpected(e);
      // A 400 is about this call's fields, as a batch's per-event "invalid" is.
      const reason: DropReason = err.code === 'shutdown' ? 'shutdown' : err.status === 400 ? 'invalid' : 'failed';
      this.#settle([call], reason, err);
    } finally {
      this.#inFlightEvents--;
    }
  }

  /** Delivers one chunk of the queue and reports every event's outcome. Never rejects. */
  async #sendBatch(chunk: EventChunk): Promise<void> {
    const n = chunk.events.length;
    this.#inFlightEvents += n;
    try {
      await this.#deliver(chunk.events, chunk.parts, chunk.prepared);
    } catch (e) {
      // Only a bug gets here; report it rather than lose the events silently.
      this.#settle(chunk.events, 'failed', e instanceof TrackerError ? e : unexpected(e));
    } finally {
      this.#inFlightEvents -= n;
    }
  }

  /**
   * Sends `events` (serialized as `parts`) to /track/batch until each is accepted, rejected
   * or given up on. A 503 with per-event results resends only the events that failed; a
   * 413 or "too many events" splits the batch and lowers the limits for later batches;
   * 429 waits (Retry-After) without using up retries, since the queue bounds what waits.
   * Every attempt's envelope has its own `sent_at`; the events are the same bytes.
   */
  async #deliver(events: WireEvent[], parts: string[], prepared?: EventChunk['prepared']): Promise<void> {
    const transport = this.#transport!;
    const url = this.#batchUrl;
    let ids = events.map((e) => e.event_id);
    let failures = 0;
    let rateLimited = 0;
    let attempts = 0;
    try {
      await transport.waitForPause(ids);
      for (;;) {
        attempts++;
        // A body prepared while the previous batch was in flight serves the first attempt,
        // while its sent_at is recent.
        const ready = attempts === 1 && prepared !== undefined && Date.now() - prepared.at <= PREPARED_MAX_AGE_MS ? prepared.body : undefined;
        const json = ready === undefined ? this.#batchBody(parts, sentAtNow()) : undefined;
        const { body, gzipped } = await (ready ?? this.#encode(json!));
        let error: TrackerError;
        let answer: Answer | undefined;
        try {
          answer = await transport.attempt(url, body, gzipped, attempts, ids);
        } catch (e) {
          if (!(e instanceof TrackerError)) throw e;
          error = e;
        }
        if (answer !== undefined) {
          const results = perEventResults(answer.json, events.length);
          if (answer.status === 200) {
            this.#acceptResults(events, results, () => false);
            return;
          }
          error = httpError(url, answer, attempts, ids, (t) => transport.redact(t));
          if (answer.retryAfterMs !== undefined && error.retryable) transport.pause(answer.retryAfterMs);

          const tooMany = tooManyEvents(answer);
          if ((answer.status === 413 || tooMany !== undefined) && events.length > 1) {
            // The server's limits are lower than ours: split, and remember it for later batches.
            const half = Math.ceil(events.length / 2);
            const max = tooMany !== undefined ? Math.min(tooMany, half) : half;
            this.#queue?.lowerLimits(max, answer.status === 413 ? Math.floor(utf8Length(json ?? this.#batchBody(parts, sentAtNow())) / 2) : Number.MAX_SAFE_INTEGER);
            this.#log?.(`[rivulet] the server refused a batch of ${events.length} events (${answer.status}); sending at most ${max} per request`);
            for (let i = 0; i < events.length; i += max) await this.#deliver(events.slice(i, i + max), parts.slice(i, i + max));
            return;
          }
          if (results !== undefined && answer.status === 503) {
            // Keep only the events the server could not store; the rest are settled now.
            const keep: number[] = [];
            this.#acceptResults(events, results, (i) => {
              if (results[i]!.status === 'accepted' || results[i]!.status === 'invalid') return false;
              keep.push(i);
              return true;
            });
            events = keep.map((i) => events[i]!);
            parts = keep.map((i) => parts[i]!);
            ids = events.map((e) => e.event_id);
            if (events.length === 0) return;
          }
          if (answer.status === 429) {
            // Rate limited: the server is up and asks us to slow down. Wait, but do not give up.
            rateLimited++;
            await transport.backoff(Math.min(rateLimited, 30), ids, error);
            continue;
          }
        }
        error ??= unexpected('no answer');
        if (!error.retryable || failures >= this.#options.maxRetries) {
          this.#settle(events, error.code === 'shutdown' ? 'shutdown' : 'failed', withIds(error, ids));
          return;
        }
        failures++;
        await transport.backoff(failures, ids, error);
      }
    } catch (e) {
      if (e instanceof TrackerError && e.code === 'shutdown') {
        this.#settle(events, 'shutdown', withIds(e, ids));
        return;
      }
      throw e;
    }
  }

  /** A batch body: the envelope, with `sent_at`, and the events. */
  #batchBody(parts: string[], sentAt: string): string {
    return `${this.#batchPrefix}${JSON.stringify(sentAt)},"events":[${parts.join(',')}]}`;
  }

  /** gzips a batch body when it is big enough and the runtime can. Never rejects. */
  async #encode(json: string): Promise<{ body: string | Uint8Array; gzipped: boolean }> {
    const min = this.#options.compressMinBytes;
    const gzip = this.#platform.gzip;
    // The UTF-8 size is at least json.length: count it only when that is below the threshold.
    if (min === undefined || gzip === undefined || (json.length < min && utf8Length(json) < min)) {
      return { body: json, gzipped: false };
    }
    try {
      return { body: await gzip(json), gzipped: true };
    } catch (e) {
      this.#log?.(`[rivulet] gzip failed, sending uncompressed: ${String(e)}`);
      return { body: json, gzipped: false };
    }
  }

  /**
   * Counts each event of an answer: accepted ones delivered, invalid ones dropped. Events for
   * which `keep(i)` is true are left for another attempt. Without per-event results (an
   * answer from another server) a 200 means all were taken.
   */
  #acceptResults(events: WireEvent[], results: BatchResult[] | undefined, keep: (i: number) => boolean): void {
    if (results === undefined) {
      this.#log?.(`[rivulet] batch answer without one result per event; counting all ${events.length} as accepted`);
      this.#delivered += events.length;
      return;
    }
    for (let i = 0; i < events.length; i++) {
      if (keep(i)) continue;
      const r = results[i]!;
      if (r.status === 'accepted') {
        this.#delivered++;
      } else {
        this.#failed++;
        this.#report(rejectedEventError(events[i]!, r));
        this.#drop(events[i]!, 'invalid');
      }
    }
  }

  /** Gives up on events (or identify calls): one onError, one onDrop each. */
  #settle(events: QueueItem[], reason: DropReason, err: TrackerError): void {
    this.#failed += events.length;
    this.#report(err);
    for (const ev of events) this.#drop(ev, reason);
  }

  /** Settles a call that failed: a rejection with throwOnError, else a report and a resolved promise. */
  #fail(err: TrackerError): Promise<void> {
    if (!(err instanceof TrackerError)) err = unexpected(err);
    if (this.#options.throwOnError) return Promise.reject(err);
    this.#report(err);
    return RESOLVED;
  }

  #report(err: TrackerError): void {
    const onError = this.#options.onError;
    if (onError === undefined) {
      console.error(err.message);
      return;
    }
    try {
      onError(err);
    } catch (e) {
      // A throwing callback must not break delivery of other events.
      console.error('rivulet-node: onError callback threw:', e);
    }
  }

  /** Calls onDrop; the caller counts the event in `failed`. */
  #drop(item: QueueItem, reason: DropReason): void {
    const onDrop = this.#options.onDrop;
    if (onDrop === undefined) return;
    try {
      onDrop(isIdentify(item) ? item : finalize(item), reason);
    } catch (e) {
      // A throwing callback must not break delivery or the other drops.
      console.error('rivulet-node: onDrop callback threw:', e);
    }
  }
}

/** One entry of a batch answer's `results`. */
interface BatchResult {
  status?: unknown;
  error?: unknown;
  details?: unknown;
  event_id?: unknown;
}

/** The answer's `results`, when it has one object per event sent. */
function perEventResults(json: unknown, count: number): BatchResult[] | undefined {
  const results = (json as { results?: unknown } | undefined)?.results;
  if (!Array.isArray(results) || results.length !== count) return undefined;
  return results.every((r) => typeof r === 'object' && r !== null) ? (results as BatchResult[]) : undefined;
}

/** Ingest's 400 for a batch over its MAX_BATCH_EVENTS: `events must hold at most N events`. */
function tooManyEvents(answer: Answer): number | undefined {
  if (answer.status !== 400) return undefined;
  const details = (answer.json as { details?: { fieldErrors?: { events?: unknown } } } | undefined)?.details;
  const messages = details?.fieldErrors?.events;
  if (!Array.isArray(messages)) return undefined;
  for (const m of messages) {
    const match = /at most (\d+) events/.exec(String(m));
    if (match) return Math.max(1, Number(match[1]));
  }
  return undefined;
}

function withIds(err: TrackerError, eventIds: string[]): TrackerError {
  if (err.eventIds.length === eventIds.length) return err;
  return new TrackerError(err.message, {
    code: err.code,
    status: err.status,
    serverMessage: err.serverMessage,
    details: err.details,
    retryable: err.retryable,
    attempts: err.attempts,
    eventIds,
    cause: err.cause,
  });
}

function unexpected(e: unknown): TrackerError {
  return new TrackerError(`rivulet-node: unexpected error: ${String(e)}`, { code: 'network', cause: e });
}

function afterShutdownError(item: QueueItem): TrackerError {
  return new TrackerError(`rivulet-node: the tracker is shut down; ${isIdentify(item) ? 'identify call' : 'event'} not sent`, {
    code: 'shutdown',
    eventIds: [item.event_id],
  });
}

function rejectedEventError(ev: WireEvent, result: BatchResult): TrackerError {
  const serverMessage = typeof result.error === 'string' ? result.error : undefined;
  const details =
    typeof result.details === 'object' && result.details !== null ? (result.details as ServerErrorDetails) : undefined;
  const what = ev.type === 'custom_event' ? `custom event "${ev.event_name}"` : 'pageview';
  const why = [serverMessage ?? String(result.status), details && describeDetails(details)].filter(Boolean).join(' - ');
  return new TrackerError(`rivulet-node: the server rejected ${what} ${ev.event_id}: ${why}`, {
    code: 'invalid_event',
    serverMessage,
    details,
    retryable: false,
    attempts: 1,
    eventIds: [ev.event_id],
  });
}

