import type { TrackerError } from './errors.js';

/** Context of a pageview or custom event. Every property is optional. */
export interface Payload {
  hostname?: string | undefined;
  pathname?: string | undefined;
  querystring?: string | undefined;
  /** Screen width in logical pixels (0–65535). */
  screenWidth?: number | undefined;
  /** Screen height in logical pixels (0–65535). */
  screenHeight?: number | undefined;
  language?: string | undefined;
  page_title?: string | undefined;
  referrer?: string | undefined;
  user_id?: string | undefined;
  /**
   * A device or cookie id known before login (sent as `anonymous_id`, at most 255
   * characters). After `identify(userId, traits, { anonymousId })` it counts as that user.
   * An empty string is the same as none.
   */
  anonymousId?: string | undefined;
  /** The visitor's user agent (not the server's); parsed into browser, OS and device. */
  user_agent?: string | undefined;
  /** The visitor's IP address (IPv4 or IPv6); resolved to a location. */
  ip_address?: string | undefined;
  /**
   * The event's id, a UUID. Default: a random UUID made at the call. Give your own (for
   * example your outbox row's id) so that sending the same event twice stores it once.
   */
  event_id?: string | undefined;
  /**
   * When the event happened: a Date, an RFC 3339 string (`2026-01-02T03:04:05.678Z`) or
   * epoch milliseconds. Default: the time of the call. Every request also says when it was
   * sent (`sent_at`, this clock), and the server stores the event at its receive time −
   * (sent_at − timestamp), correcting for a wrong clock: within 7 days before and 23 hours
   * after it receives the event, else at the receive time.
   */
  timestamp?: Date | string | number | undefined;
}

/** A value of a custom event property: a string, number or boolean, or an array of those. */
export type PropertyScalar = string | number | boolean;
export type PropertyValue = PropertyScalar | PropertyScalar[];

/** Data specific to a custom event; sent as a JSON string of at most 2048 characters. */
export type EventProperties = Record<string, PropertyValue>;

/** Why an event accepted by the tracker was not delivered (batch mode). */
export type DropReason =
  /** The queue held `maxQueueSize` events already. */
  | 'queue_full'
  /** The server rejected this event's fields (not retried). */
  | 'invalid'
  /** The server did not take it: a 4xx answer for its batch, or retries used up. */
  | 'failed'
  /** `shutdown()` ran out of time, or the event was sent after `shutdown()`. */
  | 'shutdown';

/** One event as it goes on the wire, without `api_key` and `site_id`. */
export interface WireEvent {
  type: 'pageview' | 'custom_event';
  /** UUID made when the call is made; the server counts an event_id once, so retries are safe. */
  event_id: string;
  /** RFC 3339 time of the call (or the caller's `timestamp`). */
  timestamp: string;
  event_name?: string;
  properties?: string;
  hostname?: string;
  pathname?: string;
  querystring?: string;
  screenWidth?: number;
  screenHeight?: number;
  language?: string;
  page_title?: string;
  referrer?: string;
  user_id?: string;
  anonymous_id?: string;
  user_agent?: string;
  ip_address?: string;
}

/** A trait's value: any JSON value. As the value of a trait, `null` removes that trait. */
export type TraitValue = string | number | boolean | null | TraitValue[] | { [key: string]: TraitValue | undefined };

/**
 * What you know about a user (plan, company, signup date…), merged into what the server
 * has: a trait set to `null` is removed, traits left out are kept. At most 2048 characters
 * as JSON. `undefined` values are left out, as `JSON.stringify` does.
 */
export type Traits = Record<string, TraitValue | undefined>;

/** Per-call options of `identify()`. */
export interface IdentifyOptions {
  /** The device or cookie id the user had before logging in: it becomes an alias of the user id. */
  anonymousId?: string | undefined;
  /** The call's id, a UUID (default: a random one made at the call); the server keeps one identify per id. */
  event_id?: string | undefined;
  /** When the user was identified (default: the time of the call); traits merge by it, latest wins. */
  timestamp?: Date | string | number | undefined;
}

/**
 * An identify call as `onDrop` sees it: the body of `POST {analyticsHost}/identify`
 * without `api_key` and `site_id`, plus `type`, which is not sent: it tells it from events.
 */
export interface WireIdentify {
  type: 'identify';
  /** UUID made when the call is made (or the caller's); every retry sends the same. */
  event_id: string;
  /** RFC 3339 time of the call (or the caller's `timestamp`); every retry sends the same. */
  timestamp: string;
  user_id: string;
  anonymous_id?: string;
  traits?: Traits;
}

/**
 * The type of `onDrop`. Declared through a method so that its parameter is checked
 * bivariantly: callbacks written as `(event: WireEvent, reason) => …` before identify()
 * existed still compile (they only ever see a WireIdentify if the application calls identify()).
 */
export type DropCallback = {
  bivarianceHack(event: WireEvent | WireIdentify, reason: DropReason): void;
}['bivarianceHack'];

export interface BatchOptions {
  /** Send a batch once this many events are queued. Default 100. */
  flushAt?: number | undefined;
  /** Send whatever is queued at most this many ms after it was queued. Default 1000. */
  flushInterval?: number | undefined;
  /** Events held in memory at most; further events are dropped with `onDrop(event, 'queue_full')`. Default 10000. */
  maxQueueSize?: number | undefined;
}

/** gzip of batch bodies: `true` for the default threshold, or the smallest body to compress. */
export interface CompressOptions {
  /** Bodies of at least this many bytes are gzipped. Default 1024. */
  minBytes?: number | undefined;
}

/** The `fetch` the SDK calls: the global one by default. */
export type FetchFunction = (
  url: string,
  init: {
    method: 'POST';
    headers: Record<string, string>;
    body: string | Uint8Array;
    signal: AbortSignal;
  },
) => Promise<{
  status: number;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
}>;

/** Constructor options: `analyticsHost`, `siteId`, `apiKey` and `debug`, plus reliability settings. */
export interface TrackerOptions {
  /** URL of the Rivulet instance including the `/api` prefix, e.g. `https://rivulet.example.com/api`. Optional when `disabled`. */
  analyticsHost: string | undefined;
  /** The site identifier (a positive integer, as a number or a string). Optional when `disabled`. */
  siteId: string | number | undefined;
  /** The site's secret API key (starts with `rb_`). Optional when `disabled`. */
  apiKey: string | undefined;
  /** Send nothing: calls validate their arguments and resolve. For tests and local development. Default false. */
  disabled?: boolean | undefined;
  /** The `fetch` to send with (a proxy agent, instrumentation, a test double). Default: the global `fetch`. */
  fetch?: FetchFunction | undefined;
  /** gzip batch bodies of at least `minBytes` (default 1024) where the runtime can. Default true. */
  compress?: boolean | CompressOptions | undefined;
  /** Log every request and response to the console (the API key is redacted). Default false. */
  debug?: boolean | undefined;
  /** Per-attempt request timeout in ms. Default 10000. */
  timeoutMs?: number | undefined;
  /** Retries after the first attempt (network errors, timeouts, 429, 5xx). Default 3. */
  maxRetries?: number | undefined;
  /** Base of the exponential backoff in ms. Default 200. */
  retryBaseDelayMs?: number | undefined;
  /** Cap of the backoff between attempts in ms. A server's `Retry-After` is honoured even when longer. Default 10000. */
  retryMaxDelayMs?: number | undefined;
  /** Reject the returned promises with a `TrackerError` instead of calling `onError`. Default false. */
  throwOnError?: boolean | undefined;
  /** Called with every error. Default: one `console.error` line per error. */
  onError?: ((error: TrackerError) => void) | undefined;
  /**
   * Called for every event or identify call that was accepted by a call but will not be
   * delivered (batch mode). Identify calls come with `type: 'identify'`.
   */
  onDrop?: DropCallback | undefined;
  /** Enable batch mode (`true` for the defaults) over `POST {analyticsHost}/track/batch`. Default off. */
  batch?: boolean | BatchOptions | undefined;
}

/** Counters for monitoring. An identify call counts as one event. */
export interface TrackerStats {
  /** Events waiting in the batch queue. */
  queued: number;
  /** Events in requests that have not finished yet (retries and pauses included). */
  inFlight: number;
  /** Events the server accepted. */
  delivered: number;
  /**
   * Events that passed validation at the call but will never be delivered: every `onDrop`
   * (queue full, rejected by the server, failed, shut down) and every single-mode call whose
   * request failed for good or came after `shutdown()`.
   */
  failed: number;
}

/**
 * An event between the call and its serialization. `timestamp` holds Date.now() taken at
 * the call; it becomes the ISO string only when the event is serialized or reported,
 * because toISOString() (about 1 µs) would be most of a batched call's cost.
 */
export type PendingEvent = Omit<WireEvent, 'timestamp'> & { timestamp: string | number };

/** What the batch queue holds: events, and identify calls, which go out as requests of their own. */
export type QueueItem = PendingEvent | WireIdentify;

export function isIdentify(item: QueueItem): item is WireIdentify {
  return item.type === 'identify';
}

let lastMs = NaN;
let lastIso = '';

/** Turns a pending event into its wire form, in place. */
export function finalize(ev: PendingEvent): WireEvent {
  if (typeof ev.timestamp === 'number') {
    // Queued events come out in time order, many from the same millisecond: reuse the last string.
    if (ev.timestamp !== lastMs) {
      lastMs = ev.timestamp;
      lastIso = new Date(lastMs).toISOString();
    }
    ev.timestamp = lastIso;
  }
  return ev as WireEvent;
}
