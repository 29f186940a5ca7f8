import { describeDetails, TrackerError, type ServerErrorDetails } from './errors.js';
import type { FetchFunction } from './types.js';
import { VERSION } from './version.js';

export interface TransportConfig {
  timeoutMs: number;
  retryBaseDelayMs: number;
  retryMaxDelayMs: number;
  apiKey: string;
  fetch: FetchFunction;
  /** Debug log sink, or undefined when debug is off. */
  log: ((line: string) => void) | undefined;
}

/** The server's answer to one attempt. */
export interface Answer {
  status: number;
  /** The JSON body, when it was JSON. */
  json: unknown;
  /** Retry-After in ms, when the server sent a readable one. */
  retryAfterMs: number | undefined;
}

/** How much of a request or response body a debug line shows. */
const DEBUG_BODY_CHARS = 1000;

/** The longest pause a Retry-After can impose; a larger value waits this long, then tries again. */
export const MAX_PAUSE_MS = 10 * 60 * 1000;

const USER_AGENT = `rivulet-node/${VERSION}`;

/**
 * One HTTP attempt at a time, with its timeout, plus what retrying needs: backoff, and the
 * pause a server asks for with Retry-After, which holds every request of the tracker.
 */
export class Transport {
  private readonly redactions: string[];
  /** No request starts before this time (ms since epoch): the server's Retry-After. */
  private pausedUntil = 0;

  constructor(
    private readonly cfg: TransportConfig,
    /** Aborted by shutdown(): ends in-flight requests and waits at once. */
    private readonly closing: AbortSignal,
  ) {
    // The key as it appears raw and inside a JSON string (they differ only if it has characters JSON escapes).
    this.redactions = [...new Set([cfg.apiKey, JSON.stringify(cfg.apiKey).slice(1, -1)])].filter((k) => k !== '');
  }

  /**
   * POSTs `body` once. Resolves with the server's answer, whatever its status; rejects with
   * a TrackerError (code network, timeout or shutdown) when there was none.
   */
  async attempt(url: string, body: string | Uint8Array, gzipped: boolean, attempt: number, eventIds: string[]): Promise<Answer> {
    if (this.closing.aborted) throw shutdownError(attempt - 1, eventIds);
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.cfg.timeoutMs);
    const onClose = (): void => controller.abort();
    this.closing.addEventListener('abort', onClose, { once: true });
    const started = Date.now();
    const log = this.cfg.log;
    if (log !== undefined) {
      const shown = typeof body === 'string' ? clip(body) : `(gzip, ${body.byteLength} bytes)`;
      log(`[rivulet] -> POST ${url} (attempt ${attempt}) ${this.redact(shown)}`);
    }
    const headers: Record<string, string> = { 'content-type': 'application/json', 'user-agent': USER_AGENT };
    if (gzipped) headers['content-encoding'] = 'gzip';
    try {
      const res = await this.cfg.fetch(url, { method: 'POST', headers, body, signal: controller.signal });
      // The body is read under the same timeout: a server that stalls mid-answer is a timeout too.
      const text = await res.text();
      log?.(`[rivulet] <- ${res.status} in ${Date.now() - started} ms ${this.redact(clip(text))}`);
      return { status: res.status, json: parseJson(text), retryAfterMs: parseRetryAfter(res.headers.get('retry-after')) };
    } catch (e) {
      let error: TrackerError;
      if (timedOut) {
        error = new TrackerError(`rivulet-node: POST ${url} timed out after ${this.cfg.timeoutMs} ms${after(attempt)}`, {
          code: 'timeout',
          retryable: true,
          attempts: attempt,
          eventIds,
        });
      } else if (this.closing.aborted) {
        error = shutdownError(attempt, eventIds);
      } else {
        error = new TrackerError(`rivulet-node: POST ${url} failed: ${networkReason(e)}${after(attempt)}`, {
          code: 'network',
          retryable: true,
          attempts: attempt,
          eventIds,
          cause: e,
        });
      }
      log?.(`[rivulet] <- ${error.message}`);
      throw error;
    } finally {
      clearTimeout(timer);
      this.closing.removeEventListener('abort', onClose);
    }
  }

  /** Holds every request of this tracker for `ms` (a server's Retry-After), at most MAX_PAUSE_MS. */
  pause(ms: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, Date.now() + Math.min(ms, MAX_PAUSE_MS));
  }

  /**
   * Waits before retry number `retry` (1 for the first): a random time in
   * [0, min(retryMaxDelayMs, base × 2^(retry-1))) ("full jitter"), and at least until the
   * end of a pause. Rejects with a shutdown TrackerError when shutdown() cuts it short.
   */
  async backoff(retry: number, eventIds: string[], why: TrackerError): Promise<void> {
    const jitter = Math.random() * Math.min(this.cfg.retryMaxDelayMs, this.cfg.retryBaseDelayMs * 2 ** (retry - 1));
    const delay = Math.max(jitter, this.pausedUntil - Date.now());
    this.cfg.log?.(`[rivulet] retrying in ${Math.round(delay)} ms after: ${why.message}`);
    await this.sleep(delay, eventIds);
  }

  /** Waits out a pause that another request started, before a first attempt. */
  async waitForPause(eventIds: string[]): Promise<void> {
    const ms = this.pausedUntil - Date.now();
    if (ms > 0) await this.sleep(ms, eventIds);
  }

  /** Not unref()ed: a pending retry is work in flight. shutdown() cuts it short. */
  private sleep(ms: number, eventIds: string[]): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.closing.aborted) return reject(shutdownError(0, eventIds));
      const onClose = (): void => {
        clearTimeout(timer);
        reject(shutdownError(0, eventIds));
      };
      const timer = setTimeout(() => {
        this.closing.removeEventListener('abort', onClose);
        resolve();
      }, ms);
      this.closing.addEventListener('abort', onClose, { once: true });
    });
  }

  /** Removes the API key from text meant for logs. */
  redact(text: string): string {
    for (const secret of this.redactions) text = text.split(secret).join('rb_[REDACTED]');
    return text;
  }
}

export function after(attempts: number): string {
  return attempts > 1 ? ` (after ${attempts} attempts)` : '';
}

function clip(text: string): string {
  return text.length > DEBUG_BODY_CHARS ? `${text.slice(0, DEBUG_BODY_CHARS)}… (${text.length} chars)` : text;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function shutdownError(attempts: number, eventIds: string[]): TrackerError {
  return new TrackerError('rivulet-node: the tracker was shut down before the request finished', {
    code: 'shutdown',
    attempts,
    eventIds,
  });
}

/** Node's fetch hides the useful part ("ECONNREFUSED") in `cause`. */
function networkReason(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause;
  if (cause && typeof cause.code === 'string') return cause.code;
  if (cause && typeof cause.message === 'string') return cause.message;
  return e instanceof Error ? e.message : String(e);
}

function isDetails(v: unknown): v is ServerErrorDetails {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Statuses worth another attempt: 408 (ingest's answer to a slow body), 429 and 5xx. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status <= 599);
}

/** Builds the error for a non-200 answer. */
export function httpError(
  url: string,
  answer: Answer,
  attempts: number,
  eventIds: string[],
  redact: (text: string) => string,
): TrackerError {
  const { status, json } = answer;
  const body = (typeof json === 'object' && json !== null ? json : {}) as { error?: unknown; details?: unknown };
  const serverMessage = typeof body.error === 'string' ? body.error : undefined;
  const details = isDetails(body.details) ? body.details : undefined;
  const text = [serverMessage, details && describeDetails(details)].filter(Boolean).join(' - ');
  // Redacted in case a server echoes the key back: this message goes to logs.
  return new TrackerError(redact(`rivulet-node: POST ${url} answered ${status}${text ? `: ${text}` : ''}${after(attempts)}`), {
    code: 'http',
    status,
    serverMessage: serverMessage === undefined ? undefined : redact(serverMessage),
    details,
    retryable: isRetryableStatus(status),
    attempts,
    eventIds,
  });
}

/** Retry-After in ms, from delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}
