import { describeDetails, TrackerError, type ServerErrorDetails } from './errors.js';
import { BatchQueue, MAX_BATCH_BYTES, type Chunk } from './queue.js';
import { Transport } from './transport.js';
import {
  finalize,
  type DropReason,
  type EventProperties,
  type Payload,
  type PendingEvent,
  type TrackerOptions,
  type TrackerStats,
  type WireEvent,
} from './types.js';
import { buildEvent, resolveOptions, unknownFields, type ResolvedOptions } from './validate.js';

const RESOLVED = Promise.resolve();

/** Default for shutdown(): long enough for one slow request and a retry. */
const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10_000;

/**
 * Sends pageviews and custom events to a Rivulet ingest server.
 *
 * Without `batch`, every call is one `POST {analyticsHost}/track` and its promise settles
 * when the server has answered (or retries are used up). With `batch`, calls only queue
 * the event and resolve at once; batches go to `POST {analyticsHost}/track/batch`.
 */
export class Tracker {
  private readonly options: ResolvedOptions;
  /** Debug log sink; undefined unless `debug` is on. */
  private readonly log: ((line: string) => void) | undefined;
  private readonly transport: Transport;
  private readonly closing = new AbortController();
  private readonly trackUrl: string;
  private readonly batchUrl: string;
  /** `{"api_key":…,"site_id":…,"events":[`: the part of every batch body that never changes. */
  private readonly batchPrefix: string;
  private readonly queue: BatchQueue | undefined;
  /** Single mode: requests not finished yet, for flush(). Their promises never reject. */
  private readonly inFlightRequests = new Set<Promise<void>>();
  private inFlightEvents = 0;
  private delivered = 0;
  private failed = 0;
  /** Queue-full is reported to onError once per episode (until the queue drains to half), not once per event. */
  private queueFullEpisode = false;
  private shutdownPromise: Promise<void> | undefined;
  private readonly onBeforeExit = (): void => {
    if (this.queue !== undefined && this.queue.length > 0) void this.flush();
  };

  constructor(options: TrackerOptions) {
    this.options = resolveOptions(options);
    const o = this.options;
    // Read console.log at call time so that a replaced console is honoured.
    this.log = o.debug ? (line) => console.log(line) : undefined;
    this.trackUrl = `${o.analyticsHost}/track`;
    this.batchUrl = `${o.analyticsHost}/track/batch`;
    this.batchPrefix = `{"api_key":${JSON.stringify(o.apiKey)},"site_id":${JSON.stringify(o.siteId)},"events":[`;
    this.transport = new Transport(
      {
        timeoutMs: o.timeoutMs,
        maxRetries: o.maxRetries,
        retryBaseDelayMs: o.retryBaseDelayMs,
        retryMaxDelayMs: o.retryMaxDelayMs,
        apiKey: o.apiKey,
        log: this.log,
      },
      this.closing.signal,
    );
    if (o.batch) {
      const budget = MAX_BATCH_BYTES - Buffer.byteLength(this.batchPrefix) - 2; // 2 = "]}"
      this.queue = new BatchQueue(o.batch, budget, (chunk) => this.sendBatch(chunk));
      // The flush timer is unref()ed, so a process that ends naturally would lose the queue:
      // beforeExit (not emitted on process.exit() or signals) sends it first.
      process.on('beforeExit', this.onBeforeExit);
    }
  }

  /** Records a pageview. `payload` gives its context (spec 2.5). */
  pageview(payload?: Payload): Promise<void> {
    return this.track('pageview', undefined, payload, undefined);
  }

  /** Records a custom event named `eventName`, with optional context and event-specific properties. */
  event(eventName: string, payload?: Payload, properties?: EventProperties): Promise<void> {
    return this.track('custom_event', eventName, payload, properties);
  }

  /**
   * Resolves when every event tracked before the call has been delivered or given up on
   * (reported to onError / onDrop). Never rejects. Await it before a serverless function returns.
   */
  flush(): Promise<void> {
    if (this.queue !== undefined) return this.queue.flush();
    if (this.inFlightRequests.size === 0) return RESOLVED;
    return Promise.all([...this.inFlightRequests]).then(() => undefined);
  }

  /**
   * Stops accepting events and delivers what is queued or in flight, for at most
   * `timeoutMs` (default 10000). After that, requests are cut off and their events
   * dropped with reason "shutdown". Never rejects; calling it again returns the same promise.
   */
  shutdown(timeoutMs: number = DEFAULT_SHUTDOWN_TIMEOUT_MS): Promise<void> {
    if (this.shutdownPromise !== undefined) return this.shutdownPromise;
    process.off('beforeExit', this.onBeforeExit);
    this.queue?.close();
    const drained = this.flush();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.closing.abort();
        resolve();
      }, timeoutMs);
      timer.unref();
    });
    this.shutdownPromise = Promise.race([drained, deadline])
      // After an abort, what remains fails fast; wait for it so every drop is reported.
      .then(() => this.flush())
      .finally(() => clearTimeout(timer));
    return this.shutdownPromise;
  }

  /** Counters for monitoring. */
  stats(): TrackerStats {
    return {
      queued: this.queue?.length ?? 0,
      inFlight: this.inFlightEvents,
      delivered: this.delivered,
      failed: this.failed,
    };
  }

  private track(
    type: 'pageview' | 'custom_event',
    eventName: string | undefined,
    payload: Payload | undefined,
    properties: EventProperties | undefined,
  ): Promise<void> {
    let ev: PendingEvent;
    try {
      ev = buildEvent(type, eventName, payload, properties);
    } catch (e) {
      return this.fail(e as TrackerError);
    }
    if (this.log !== undefined) {
      const ignored = unknownFields(payload);
      if (ignored.length > 0) this.log(`[rivulet] not sent, unknown payload fields: ${ignored.join(', ')}`);
    }
    return this.queue !== undefined ? this.enqueue(this.queue, ev) : this.sendOne(ev);
  }

  private enqueue(queue: BatchQueue, ev: PendingEvent): Promise<void> {
    const outcome = queue.offer(ev);
    if (outcome === 'queued') {
      if (this.queueFullEpisode && queue.length <= (this.options.batch?.maxQueueSize ?? 0) / 2) this.queueFullEpisode = false;
      return RESOLVED;
    }
    if (outcome === 'closed') {
      this.drop(ev, 'shutdown');
      return this.fail(shutdownError(ev));
    }
    this.drop(ev, 'queue_full');
    // Building an Error costs microseconds: only do it when someone will see it.
    if (!this.options.throwOnError && this.queueFullEpisode) return RESOLVED;
    const err = new TrackerError(
      `rivulet-node: batch queue full (${queue.length} events); dropping new events until it drains - is the server reachable?`,
      { code: 'queue_full', retryable: true, eventIds: [ev.event_id] },
    );
    if (this.options.throwOnError) return Promise.reject(err);
    this.queueFullEpisode = true;
    this.report(err);
    return RESOLVED;
  }

  private sendOne(ev: PendingEvent): Promise<void> {
    if (this.closing.signal.aborted || this.shutdownPromise !== undefined) return this.fail(shutdownError(ev));
    const body = JSON.stringify({ api_key: this.options.apiKey, site_id: this.options.siteId, ...finalize(ev) });
    this.inFlightEvents++;
    const result = this.transport.post(this.trackUrl, body, [ev.event_id]).then(
      () => {
        this.delivered++;
      },
      (e: unknown) => {
        this.failed++;
        throw e;
      },
    );
    const settled = result.then(
      () => undefined,
      () => undefined,
    );
    this.inFlightRequests.add(settled);
    void settled.then(() => {
      this.inFlightRequests.delete(settled);
      this.inFlightEvents--;
    });
    return result.catch((e: unknown) => this.fail(e as TrackerError));
  }

  /** Delivers one batch and reports what the server did with each event. Never rejects. */
  private async sendBatch(chunk: Chunk): Promise<void> {
    const { events } = chunk;
    this.inFlightEvents += events.length;
    try {
      const ids = events.map((e) => e.event_id);
      const reply = await this.transport.post(this.batchUrl, `${this.batchPrefix}${chunk.json}]}`, ids);
      const results = (reply.body as { results?: unknown } | undefined)?.results;
      if (!Array.isArray(results) || results.length !== events.length) {
        // A 200 means the batch was taken; without per-event results there is nothing to drop.
        this.log?.(`[rivulet] batch answer without one result per event; counting all ${events.length} as accepted`);
      }
      for (let i = 0; i < events.length; i++) {
        const r = (Array.isArray(results) ? results[i] : undefined) as { status?: unknown } | undefined;
        // "duplicate" is success too: the server already has this event_id.
        if (r && typeof r === 'object' && r.status !== undefined && r.status !== 'accepted' && r.status !== 'duplicate') {
          this.failed++;
          this.report(rejectedEventError(events[i]!, r));
          this.drop(events[i]!, 'invalid');
        } else {
          this.delivered++;
        }
      }
    } catch (e) {
      const err = e as TrackerError;
      this.failed += events.length;
      this.report(err);
      const reason: DropReason = err.code === 'shutdown' ? 'shutdown' : 'failed';
      for (const ev of events) this.drop(ev, reason);
    } finally {
      this.inFlightEvents -= events.length;
    }
  }

  /** Settles a call that failed: a rejection with throwOnError, else a report and a resolved promise. */
  private fail(err: TrackerError): Promise<void> {
    if (!(err instanceof TrackerError)) {
      err = new TrackerError(`rivulet-node: unexpected error: ${String(err)}`, { code: 'network', cause: err });
    }
    if (this.options.throwOnError) return Promise.reject(err);
    this.report(err);
    return RESOLVED;
  }

  private report(err: TrackerError): void {
    const onError = this.options.onError;
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

  private drop(ev: PendingEvent, reason: DropReason): void {
    const onDrop = this.options.onDrop;
    if (onDrop === undefined) return;
    try {
      onDrop(finalize(ev), reason);
    } catch (e) {
      console.error('rivulet-node: onDrop callback threw:', e);
    }
  }
}

function shutdownError(ev: PendingEvent): TrackerError {
  return new TrackerError('rivulet-node: the tracker is shut down; event not sent', {
    code: 'shutdown',
    eventIds: [ev.event_id],
  });
}

function rejectedEventError(ev: WireEvent, result: { status?: unknown; error?: unknown; details?: unknown }): TrackerError {
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
