/** The server's `details` of a validation error: `fieldErrors` by field, `formErrors` for rules that span fields. */
export interface ServerErrorDetails {
  fieldErrors: Record<string, string[]>;
  formErrors: string[];
}

export type TrackerErrorCode =
  /** A constructor option is missing or invalid. */
  | 'invalid_options'
  /** An event failed validation, in the SDK or (per event, in a batch) on the server. */
  | 'invalid_event'
  /** The server answered with a status other than 200 (or a batch event failed for good). */
  | 'http'
  /** No answer: connection refused, reset, DNS… */
  | 'network'
  /** No answer within `timeoutMs`. */
  | 'timeout'
  /** Batch mode: the queue was full, so events are being dropped. */
  | 'queue_full'
  /** The tracker was shut down. */
  | 'shutdown';

export interface TrackerErrorInit {
  code: TrackerErrorCode;
  status?: number | undefined;
  serverMessage?: string | undefined;
  details?: ServerErrorDetails | undefined;
  retryable?: boolean | undefined;
  attempts?: number | undefined;
  eventIds?: string[] | undefined;
  cause?: unknown;
}

/**
 * Brand shared by every copy of this class: the ESM and the CommonJS build of this package
 * (and two installed copies of it) each define their own class, so `instanceof` checks the
 * brand rather than the prototype chain.
 */
const BRAND = Symbol.for('rivulet-node.TrackerError');

/** True for a TrackerError from any build or copy of this package (ESM, CommonJS). */
export function isTrackerError(value: unknown): value is TrackerError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
}

/**
 * Every error the SDK reports, thrown, rejected or passed to `onError`, is one of these.
 * `err instanceof TrackerError` holds whichever build (ESM or CommonJS) made `err`.
 */
export class TrackerError extends Error {
  override readonly name = 'TrackerError';
  readonly code: TrackerErrorCode;
  /** HTTP status of the server's answer; undefined when there was none. */
  readonly status: number | undefined;
  /** The server's `error` text, when it sent one. */
  readonly serverMessage: string | undefined;
  /** The server's `details` object (validation errors), when it sent one. */
  readonly details: ServerErrorDetails | undefined;
  /** Whether trying again later could succeed (network errors, timeouts, 429, 5xx). */
  readonly retryable: boolean;
  /** HTTP attempts made (0 when the event never left the process). */
  readonly attempts: number;
  /** `event_id`s of the events this error is about. */
  readonly eventIds: string[];

  constructor(message: string, init: TrackerErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code;
    this.status = init.status;
    this.serverMessage = init.serverMessage;
    this.details = init.details;
    this.retryable = init.retryable ?? false;
    this.attempts = init.attempts ?? 0;
    this.eventIds = init.eventIds ?? [];
  }

  /** `instanceof` by brand, so that the ESM and CommonJS classes recognise each other's errors. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    // A subclass keeps the ordinary prototype check.
    if (this !== TrackerError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return isTrackerError(value);
  }
}
// On the prototype, not on each error: it stays out of util.inspect and of own keys.
Object.defineProperty(TrackerError.prototype, BRAND, { value: true });

/** One line from the server's validation details, e.g. `properties: must be valid JSON; Custom events require event_name`. */
export function describeDetails(details: ServerErrorDetails): string {
  const parts: string[] = [];
  const fields = typeof details.fieldErrors === 'object' && details.fieldErrors !== null ? details.fieldErrors : {};
  for (const [field, messages] of Object.entries(fields)) {
    parts.push(`${field}: ${Array.isArray(messages) ? messages.join(', ') : String(messages)}`);
  }
  if (Array.isArray(details.formErrors)) parts.push(...details.formErrors.map(String));
  return parts.join('; ');
}
