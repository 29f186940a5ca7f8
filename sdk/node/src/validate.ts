import { TrackerError } from './errors.js';
import { isIpAddress, isUuid, MAX_TIMESTAMP_MS, parseRfc3339 } from './formats.js';
import type {
  BatchOptions,
  DropCallback,
  EventProperties,
  FetchFunction,
  Payload,
  PendingEvent,
  Traits,
  TrackerOptions,
  WireIdentify,
} from './types.js';

/** Options with every default filled in. */
export interface ResolvedOptions {
  /** `analyticsHost` without trailing slashes ('' when disabled without one). */
  analyticsHost: string;
  siteId: string | number;
  apiKey: string;
  disabled: boolean;
  fetch: FetchFunction | undefined;
  /** Smallest batch body (bytes) to gzip; undefined: never. */
  compressMinBytes: number | undefined;
  debug: boolean;
  timeoutMs: number;
  maxRetries: number;
  retryBaseDelayMs: number;
  retryMaxDelayMs: number;
  throwOnError: boolean;
  onError: ((error: TrackerError) => void) | undefined;
  onDrop: DropCallback | undefined;
  batch: Required<BatchOptions> | undefined;
}

export const DEFAULTS = {
  timeoutMs: 10_000,
  maxRetries: 3,
  retryBaseDelayMs: 200,
  retryMaxDelayMs: 10_000,
  flushAt: 100,
  flushInterval: 1000,
  maxQueueSize: 10_000,
  compressMinBytes: 1024,
} as const;

/** Site ids are UInt32 on the server. */
const MAX_SITE_ID = 2 ** 32 - 1;

/** Longest delay setTimeout accepts; larger values fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function optionError(name: string, problem: string): TrackerError {
  return new TrackerError(`rivulet-node: option "${name}" ${problem}`, { code: 'invalid_options' });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

function numberOption(
  o: Record<string, unknown>,
  name: string,
  fallback: number,
  rule: { min: number; integer?: boolean },
): number {
  const v = o[name];
  if (v === undefined) return fallback;
  const ok = typeof v === 'number' && v >= rule.min && v <= MAX_TIMER_MS && (!rule.integer || Number.isInteger(v));
  if (!ok) {
    const kind = rule.integer ? 'an integer' : 'a number';
    return fail(optionError(name, `must be ${kind} from ${rule.min} to ${MAX_TIMER_MS} (got ${describe(v)})`));
  }
  return v;
}

function functionOption<T>(o: Record<string, unknown>, name: string): T | undefined {
  const v = o[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'function') return fail(optionError(name, `must be a function (got ${describe(v)})`));
  return v as T;
}

function booleanOption(o: Record<string, unknown>, name: string): boolean {
  const v = o[name];
  if (v === undefined) return false;
  if (typeof v !== 'boolean') return fail(optionError(name, `must be a boolean (got ${describe(v)})`));
  return v;
}

function fail(err: TrackerError): never {
  throw err;
}

/** A short description of a bad value for error messages; never echoes strings, which may be secrets. */
function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number') return String(v);
  return `a ${typeof v}`;
}

/** Checks the constructor argument and fills in defaults; throws a TrackerError naming the bad option. */
export function resolveOptions(input: unknown): ResolvedOptions {
  if (!isPlainObject(input)) {
    throw new TrackerError('rivulet-node: new Tracker(options) needs an options object with analyticsHost, siteId and apiKey', {
      code: 'invalid_options',
    });
  }
  const o = input as Record<string, unknown> & Partial<TrackerOptions>;
  const disabled = booleanOption(o, 'disabled');
  const common = {
    disabled,
    fetch: functionOption<FetchFunction>(o, 'fetch'),
    compressMinBytes: compressOption(o.compress),
    debug: booleanOption(o, 'debug'),
    timeoutMs: numberOption(o, 'timeoutMs', DEFAULTS.timeoutMs, { min: 1 }),
    maxRetries: numberOption(o, 'maxRetries', DEFAULTS.maxRetries, { min: 0, integer: true }),
    retryBaseDelayMs: numberOption(o, 'retryBaseDelayMs', DEFAULTS.retryBaseDelayMs, { min: 0 }),
    retryMaxDelayMs: numberOption(o, 'retryMaxDelayMs', DEFAULTS.retryMaxDelayMs, { min: 0 }),
    throwOnError: booleanOption(o, 'throwOnError'),
    onError: functionOption<ResolvedOptions['onError']>(o, 'onError'),
    onDrop: functionOption<ResolvedOptions['onDrop']>(o, 'onDrop'),
    batch: batchOption(o.batch),
  };
  // A disabled tracker sends nothing, so it needs no destination: tests and local runs
  // often have no key. Whatever is given is still checked.
  const absent = (v: unknown): boolean => v === undefined || v === null || v === '';
  if (disabled && absent(o.analyticsHost) && absent(o.siteId) && absent(o.apiKey)) {
    return { analyticsHost: '', siteId: '', apiKey: '', ...common };
  }

  const host = o.analyticsHost;
  if (host === undefined || host === null || host === '') {
    throw optionError('analyticsHost', 'is required: the URL of your Rivulet instance including /api, e.g. "https://rivulet.example.com/api"');
  }
  if (typeof host !== 'string') throw optionError('analyticsHost', `must be a string URL (got ${describe(host)})`);
  let url: URL;
  try {
    url = new URL(host);
  } catch {
    throw optionError('analyticsHost', `must be an absolute http(s) URL including /api, e.g. "https://rivulet.example.com/api" (got "${host}")`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw optionError('analyticsHost', `must use http or https (got "${url.protocol}")`);
  }
  if (url.search || url.hash) throw optionError('analyticsHost', 'must not contain a query string or fragment');

  const siteId = o.siteId;
  if (siteId === undefined || siteId === null || siteId === '') throw optionError('siteId', 'is required');
  if (typeof siteId !== 'string' && typeof siteId !== 'number') {
    throw optionError('siteId', `must be a string or a number (got ${describe(siteId)})`);
  }
  // The server stores site ids as 32-bit positive integers; catch a typo here rather than as a 400 or 404 later.
  const id = typeof siteId === 'number' ? siteId : /^[0-9]+$/.test(siteId) ? Number(siteId) : NaN;
  if (!Number.isInteger(id) || id < 1 || id > MAX_SITE_ID) {
    const got = typeof siteId === 'string' ? `"${siteId}"` : String(siteId);
    throw optionError('siteId', `must be a positive integer (a number or a string of digits) up to ${MAX_SITE_ID} (got ${got})`);
  }

  const apiKey = o.apiKey;
  if (apiKey === undefined || apiKey === null || apiKey === '') {
    throw optionError('apiKey', 'is required: the site API key (starts with "rb_"); keep it in an environment variable');
  }
  if (typeof apiKey !== 'string') throw optionError('apiKey', `must be a string (got ${describe(apiKey)})`);
  if (!apiKey.startsWith('rb_') || apiKey.length <= 3) {
    throw optionError('apiKey', 'must start with "rb_" (generate one in the site settings, API Key tab)');
  }

  return { analyticsHost: host.replace(/\/+$/, ''), siteId, apiKey, ...common };
}

function batchOption(v: unknown): Required<BatchOptions> | undefined {
  if (v === undefined || v === false) return undefined;
  if (v !== true && !isPlainObject(v)) {
    throw optionError('batch', `must be true, false or an object { flushAt, flushInterval, maxQueueSize } (got ${describe(v)})`);
  }
  const b = (v === true ? {} : v) as Record<string, unknown>;
  return {
    flushAt: numberOption(b, 'flushAt', DEFAULTS.flushAt, { min: 1, integer: true }),
    flushInterval: numberOption(b, 'flushInterval', DEFAULTS.flushInterval, { min: 1 }),
    maxQueueSize: numberOption(b, 'maxQueueSize', DEFAULTS.maxQueueSize, { min: 1, integer: true }),
  };
}

function compressOption(v: unknown): number | undefined {
  if (v === undefined || v === true) return DEFAULTS.compressMinBytes;
  if (v === false) return undefined;
  if (!isPlainObject(v)) throw optionError('compress', `must be true, false or an object { minBytes } (got ${describe(v)})`);
  return numberOption(v, 'minBytes', DEFAULTS.compressMinBytes, { min: 0, integer: true });
}

/**
 * Maximum length in characters of each string field: the server's (`LIMITS` in the
 * repository's common/src/contract.rs, whose tests check these numbers; docs/design.md,
 * "Wire contract"), so that an event the server would reject fails here, before it is
 * queued.
 */
export const LIMITS = {
  hostname: 253,
  pathname: 2048,
  querystring: 2048,
  language: 35,
  page_title: 512,
  referrer: 2048,
  user_id: 255,
  anonymous_id: 255,
  user_agent: 512,
  event_name: 256,
  properties: 2048,
} as const;

const STRING_FIELDS = [
  'hostname',
  'pathname',
  'querystring',
  'language',
  'page_title',
  'referrer',
  'user_id',
  'user_agent',
] as const;
const KNOWN_FIELDS = new Set<string>([...STRING_FIELDS, 'anonymousId', 'screenWidth', 'screenHeight', 'ip_address', 'event_id', 'timestamp']);
const IDENTIFY_OPTIONS = new Set<string>(['anonymousId', 'event_id', 'timestamp']);

/** Longest `traits` of an identify call, in characters of its JSON (the server's limit). */
export const TRAITS_MAX_CHARS = 2048;

/**
 * Nesting deeper than this cannot fit in TRAITS_MAX_CHARS (each level takes at least two
 * characters); the check stops there instead of recursing until the stack runs out.
 */
const TRAITS_MAX_DEPTH = TRAITS_MAX_CHARS / 2;

function invalid(message: string): TrackerError {
  return new TrackerError(`rivulet-node: ${message}`, { code: 'invalid_event' });
}

/** Length in Unicode characters, as the server counts; only walks the string when UTF-16 length exceeds max. */
function tooLong(s: string, max: number): boolean {
  if (s.length <= max) return false;
  let chars = 0;
  for (const _ of s) if (++chars > max) return true;
  return false;
}

function checkString(value: unknown, name: string, max: number): string {
  if (typeof value !== 'string') throw invalid(`${name} must be a string (got ${describe(value)})`);
  if (tooLong(value, max)) throw invalid(`${name} must be at most ${max} characters (got ${[...value].length})`);
  return value;
}

function checkScreen(value: unknown, name: string): number {
  if (typeof value !== 'number' || !(value >= 0 && value <= 65535)) {
    throw invalid(`payload.${name} must be a number from 0 to 65535 (got ${describe(value)})`);
  }
  return value;
}

function isScalar(v: unknown): boolean {
  return typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));
}

/** Validates custom event properties (`EventProperties`) and returns them as the JSON string the wire wants. */
function encodeProperties(properties: unknown): string {
  if (!isPlainObject(properties)) throw invalid(`properties must be a plain object (got ${describe(properties)})`);
  for (const key in properties) {
    const v = properties[key];
    if (isScalar(v) || v === undefined) continue; // JSON.stringify leaves undefined out
    if (Array.isArray(v) && v.every(isScalar)) continue;
    throw invalid(
      `properties.${key} must be a string, a finite number, a boolean or an array of those (got ${describe(v)})`,
    );
  }
  const json = JSON.stringify(properties);
  if (tooLong(json, LIMITS.properties)) {
    throw invalid(`properties must be at most ${LIMITS.properties} characters as JSON (got ${[...json].length})`);
  }
  return json;
}

function checkEventId(v: unknown, name = 'payload.event_id'): string {
  if (typeof v !== 'string' || !isUuid(v)) {
    throw invalid(`${name} must be a UUID string, e.g. "0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a" (got ${typeof v === 'string' ? `"${v.slice(0, 64)}"` : describe(v)})`);
  }
  return v;
}

const TIMESTAMP_RULE = 'a valid Date, an RFC 3339 date-time string such as "2026-01-02T03:04:05.678Z", or epoch milliseconds (an integer)';

/** A caller's timestamp as the RFC 3339 string to send; what the server would refuse fails here. */
function checkTimestamp(v: unknown, name = 'payload.timestamp'): string {
  if (typeof v === 'string') {
    if (parseRfc3339(v) === undefined) throw invalid(`${name} must be ${TIMESTAMP_RULE} (got "${v.slice(0, 64)}")`);
    return v;
  }
  let ms: number;
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || v < 1 || v >= MAX_TIMESTAMP_MS) {
      throw invalid(`${name} must be ${TIMESTAMP_RULE} from 1 to ${MAX_TIMESTAMP_MS - 1} (got ${describe(v)})`);
    }
    ms = v;
  } else if (Object.prototype.toString.call(v) === '[object Date]') {
    ms = (v as Date).getTime();
    // toISOString() writes six-digit years past 9999, which RFC 3339 has not.
    if (!(ms >= -62_167_219_200_000 && ms < MAX_TIMESTAMP_MS)) {
      throw invalid(`${name} must be ${TIMESTAMP_RULE}; the Date is invalid or outside the years 0-9999`);
    }
  } else {
    throw invalid(`${name} must be ${TIMESTAMP_RULE} (got ${describe(v)})`);
  }
  return new Date(ms).toISOString();
}

/** Fields of the payload that the caller set but the wire does not know; only computed for debug logs. */
export function unknownFields(payload: unknown): string[] {
  if (!isPlainObject(payload)) return [];
  return Object.keys(payload).filter((k) => !KNOWN_FIELDS.has(k));
}

/** Fields of identify()'s options that the SDK does not know; only computed for debug logs. */
export function unknownIdentifyOptions(options: unknown): string[] {
  if (!isPlainObject(options)) return [];
  return Object.keys(options).filter((k) => !IDENTIFY_OPTIONS.has(k));
}

/**
 * An anonymous id to send, or undefined for none. An empty string means none and is not
 * sent: an identify with `anonymous_id: ""` would make "" an alias of the user.
 */
function anonymousId(v: unknown, name: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  const id = checkString(v, name, LIMITS.anonymous_id);
  return id === '' ? undefined : id;
}

/**
 * Validates one call's arguments and builds the event to send. Throws a TrackerError
 * (code "invalid_event") naming the field. The id and timestamp are fixed here, when the
 * call is made, so that retries carry the same ones.
 */
export function buildEvent(
  type: 'pageview' | 'custom_event',
  eventName: unknown,
  payload: Payload | null | undefined,
  properties: EventProperties | null | undefined,
  randomUUID: () => string,
): PendingEvent {
  const ev: PendingEvent = { type, event_id: '', timestamp: Date.now() };
  if (type === 'custom_event') {
    if (eventName === undefined || eventName === null || eventName === '') {
      throw invalid('event(eventName) needs a non-empty eventName string');
    }
    ev.event_name = checkString(eventName, 'eventName', LIMITS.event_name);
    if (properties !== undefined && properties !== null) ev.properties = encodeProperties(properties);
  }
  if (payload === undefined || payload === null) {
    ev.event_id = randomUUID();
    return ev;
  }
  if (!isPlainObject(payload)) throw invalid(`payload must be a plain object (got ${describe(payload)})`);
  const { event_id, timestamp } = payload;
  ev.event_id = event_id === undefined || event_id === null ? randomUUID() : checkEventId(event_id);
  if (timestamp !== undefined && timestamp !== null) ev.timestamp = checkTimestamp(timestamp);

  // Only known fields are copied: unknown ones are not sent.
  for (const name of STRING_FIELDS) {
    const v = payload[name];
    if (v !== undefined && v !== null) ev[name] = checkString(v, `payload.${name}`, LIMITS[name]);
  }
  const anonymous = anonymousId(payload.anonymousId, 'payload.anonymousId');
  if (anonymous !== undefined) ev.anonymous_id = anonymous;
  const ip = payload.ip_address;
  if (ip !== undefined && ip !== null) {
    if (typeof ip !== 'string' || !isIpAddress(ip)) {
      throw invalid(`payload.ip_address must be an IPv4 or IPv6 address (got ${typeof ip === 'string' ? `"${ip.slice(0, 64)}"` : describe(ip)})`);
    }
    ev.ip_address = ip;
  }
  const { screenWidth, screenHeight } = payload;
  if (screenWidth !== undefined && screenWidth !== null) ev.screenWidth = checkScreen(screenWidth, 'screenWidth');
  if (screenHeight !== undefined && screenHeight !== null) ev.screenHeight = checkScreen(screenHeight, 'screenHeight');
  return ev;
}

/** `a Date`, `a Map`…: what a value that JSON cannot carry is, for error messages. */
function describeNonJson(v: unknown): string {
  if (typeof v !== 'object' || v === null) return describe(v);
  const name = (Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  return typeof name === 'string' && name !== '' ? `a ${name}` : 'an object that is not a plain object';
}

/**
 * Checks that `v` survives JSON.stringify unchanged: strings, finite numbers, booleans,
 * null, arrays and plain objects of those. What JSON.stringify would silently turn into
 * something else fails instead: NaN and undefined in an array become null (for a trait,
 * "remove it"), a Date becomes a string, a Map becomes {}, a cycle throws.
 */
function checkJsonValue(v: unknown, path: string, ancestors: Set<object>): void {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return;
  if (typeof v === 'number') {
    if (Number.isFinite(v)) return;
    throw invalid(`${path} must be a finite number (got ${v}); JSON.stringify would send null`);
  }
  if (typeof v === 'object' && (Array.isArray(v) || isPlainObject(v))) {
    if (ancestors.has(v)) throw invalid(`${path} contains itself (a cycle), which JSON cannot carry`);
    if (ancestors.size >= TRAITS_MAX_DEPTH) {
      throw invalid(`traits must be at most ${TRAITS_MAX_CHARS} characters as JSON (nested over ${TRAITS_MAX_DEPTH} levels deep)`);
    }
    ancestors.add(v);
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        // A hole or undefined in an array is sent as null by JSON.stringify: not what was meant.
        if (v[i] === undefined) throw invalid(`${path}[${i}] is undefined; JSON.stringify would send null`);
        checkJsonValue(v[i], `${path}[${i}]`, ancestors);
      }
    } else {
      for (const key in v) {
        const x = v[key];
        if (x !== undefined) checkJsonValue(x, `${path}.${key}`, ancestors); // left out, as JSON.stringify does
      }
    }
    ancestors.delete(v);
    return;
  }
  const hint = v instanceof Date ? '; pass date.toISOString()' : '';
  throw invalid(`${path} must be a JSON value: a string, finite number, boolean, null, array or plain object (got ${describeNonJson(v)})${hint}`);
}

/**
 * Validates identify() traits and returns a copy of them. The copy is what gets sent, so
 * that a caller changing its object after the call cannot change a queued identify or
 * make a retry differ from the first attempt.
 */
function encodeTraits(traits: unknown): Traits {
  if (!isPlainObject(traits)) throw invalid(`traits must be a plain object (got ${describe(traits)})`);
  checkJsonValue(traits, 'traits', new Set());
  const json = JSON.stringify(traits);
  // Characters of the compact JSON, as for event properties: the server measures the same.
  if (tooLong(json, TRAITS_MAX_CHARS)) {
    throw invalid(`traits must be at most ${TRAITS_MAX_CHARS} characters as JSON (got ${[...json].length})`);
  }
  return JSON.parse(json) as Traits;
}

/**
 * Validates the arguments of identify() and builds the call to send. Throws a TrackerError
 * (code "invalid_event") naming the argument. The id and timestamp are fixed here, when
 * the call is made, so that every retry carries the same ones: the server deduplicates on
 * the id and merges traits by the timestamp.
 */
export function buildIdentify(userId: unknown, traits: unknown, options: unknown, randomUUID: () => string): WireIdentify {
  const now = Date.now();
  if (userId === undefined || userId === null || userId === '') {
    throw invalid('identify(userId) needs a non-empty userId string');
  }
  const user = checkString(userId, 'userId', LIMITS.user_id);
  let opts: Record<string, unknown> = {};
  if (options !== undefined && options !== null) {
    if (!isPlainObject(options)) throw invalid(`identify options must be a plain object (got ${describe(options)})`);
    opts = options;
  }
  const { event_id, timestamp } = opts;
  const call: WireIdentify = {
    type: 'identify',
    event_id: event_id === undefined || event_id === null ? randomUUID() : checkEventId(event_id, 'options.event_id'),
    timestamp: timestamp === undefined || timestamp === null ? new Date(now).toISOString() : checkTimestamp(timestamp, 'options.timestamp'),
    user_id: user,
  };
  const anonymous = anonymousId(opts.anonymousId, 'options.anonymousId');
  if (anonymous !== undefined) call.anonymous_id = anonymous;
  if (traits !== undefined && traits !== null) call.traits = encodeTraits(traits);
  return call;
}
