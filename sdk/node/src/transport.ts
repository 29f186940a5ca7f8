import { describeDetails, TrackerError, type ServerErrorDetails } from './errors.js';

export interface TransportConfig {
  timeoutMs: number;
  maxRetries: number;
  retryBaseDelayMs: number;
  retryMaxDelayMs: number;
  apiKey: string;
  /** Debug log sink, or undefined when debug is off. */
  log: ((line: string) => void) | undefined;
}

/** A 200 answer, with its JSON body when it had one. */
export interface Reply {
  status: number;
  body: unknown;
}

/** How much of a request or response body a debug line shows. */
const DEBUG_BODY_CHARS = 1000;

/**
 * POSTs JSON bodies with a per-attempt timeout and retries. The body string is sent
 * unchanged on every attempt, so the event ids in it make retries idempotent.
 */
export class Transport {
  private readonly redactions: string[];

  constructor(
    private readonly cfg: TransportConfig,
    /** Aborted by shutdown(): ends in-flight requests and backoff waits at once. */
    private readonly closing: AbortSignal,
  ) {
    // The key as it appears raw and inside a JSON string (they differ only if it has characters JSON escapes).
    this.redactions = [...new Set([cfg.apiKey, JSON.stringify(cfg.apiKey).slice(1, -1)])];
  }

  /** Resolves with the 200 reply; rejects with a TrackerError once retries are used up or not allowed. */
  async post(url: string, body: string, eventIds: string[]): Promise<Reply> {
    for (let attempt = 1; ; attempt++) {
      let error: TrackerError;
      let retryAfterMs: number | undefined;
      try {
        const res = await this.attempt(url, body, attempt, eventIds);
        if (res.status === 200) return { status: 200, body: res.json };
        error = httpError(url, res.status, res.json, attempt, eventIds, (t) => this.redact(t));
        retryAfterMs = parseRetryAfter(res.retryAfter);
      } catch (e) {
        if (!(e instanceof TrackerError)) throw e;
        error = e;
      }
      if (!error.retryable || attempt > this.cfg.maxRetries) throw error;

      // Full jitter: a random wait in [0, min(cap, base * 2^n)) spreads out clients that failed together.
      let delay = Math.random() * Math.min(this.cfg.retryMaxDelayMs, this.cfg.retryBaseDelayMs * 2 ** (attempt - 1));
      if (retryAfterMs !== undefined) {
        // Never retry sooner than the server asked; give up rather than wait longer than the cap.
        if (retryAfterMs > this.cfg.retryMaxDelayMs) throw error;
        delay = Math.max(delay, retryAfterMs);
      }
      this.cfg.log?.(`[rivulet] retrying in ${Math.round(delay)} ms after: ${error.message}`);
      await this.sleep(delay, eventIds);
    }
  }

  private async attempt(
    url: string,
    body: string,
    attempt: number,
    eventIds: string[],
  ): Promise<{ status: number; json: unknown; retryAfter: string | null }> {
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
    this.cfg.log?.(`[rivulet] -> POST ${url} (attempt ${attempt}) ${this.redact(clip(body))}`);
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        signal: controller.signal,
      });
      // The body is read under the same timeout: a server that stalls mid-answer is a timeout too.
      const text = await res.text();
      this.cfg.log?.(`[rivulet] <- ${res.status} in ${Date.now() - started} ms ${this.redact(clip(text))}`);
      return { status: res.status, json: parseJson(text), retryAfter: res.headers.get('retry-after') };
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
      this.cfg.log?.(`[rivulet] <- ${error.message}`);
      throw error;
    } finally {
      clearTimeout(timer);
      this.closing.removeEventListener('abort', onClose);
    }
  }

  /** Waits between attempts; shutdown() cuts the wait short. Not unref()ed: a pending retry is work in flight. */
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

function after(attempts: number): string {
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

function shutdownError(attempts: number, eventIds: string[]): TrackerError {
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

/** Builds the error for a non-200 answer; only 429 and 5xx may be retried (the issue's contract). */
export function httpError(
  url: string,
  status: number,
  json: unknown,
  attempts: number,
  eventIds: string[],
  redact: (text: string) => string,
): TrackerError {
  const body = (typeof json === 'object' && json !== null ? json : {}) as { error?: unknown; details?: unknown };
  const serverMessage = typeof body.error === 'string' ? body.error : undefined;
  const details = isDetails(body.details) ? body.details : undefined;
  const text = [serverMessage, details && describeDetails(details)].filter(Boolean).join(' - ');
  // Redacted in case a server echoes the key back: this message goes to logs.
  return new TrackerError(redact(`rivulet-node: POST ${url} answered ${status}${text ? `: ${text}` : ''}${after(attempts)}`), {
    code: 'http',
    status,
    serverMessage,
    details,
    retryable: status === 429 || (status >= 500 && status <= 599),
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
