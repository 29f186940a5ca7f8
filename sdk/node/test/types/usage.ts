// Compiled with `tsc --noEmit` by `npm test`: the public types accept the documented examples
// and reject wrong usage. Nothing here runs.
import Tracker, { Tracker as NamedTracker, TrackerError, isTrackerError, VERSION, type DropReason, type EventProperties, type FetchFunction, type IdentifyOptions, type Payload, type TrackerOptions, type Traits, type TraitValue, type WireEvent, type WireIdentify } from 'rivulet-node';

declare const process: { env: Record<string, string | undefined> };

async function specExamples(): Promise<void> {
  // The README's options and calls.
  const tracker = new Tracker({
    analyticsHost: 'https://rivulet.example.com/api',
    siteId: '1',
    apiKey: process.env.RIVULET_API_KEY!,
    debug: true,
  });
  new NamedTracker({ analyticsHost: 'http://127.0.0.1:3000/api', siteId: 1, apiKey: 'rb_abc' });

  await tracker.pageview();
  await tracker.pageview({
    hostname: 'example.com',
    pathname: '/pricing',
    querystring: '?ref=nav',
    screenWidth: 1920,
    screenHeight: 1080,
    language: 'en',
    page_title: 'Pricing',
    referrer: 'https://google.com',
    user_id: 'user-42',
    user_agent: 'Mozilla/5.0',
    ip_address: '81.2.69.142',
  });
  await tracker.event('signup');
  await tracker.event('signup', { pathname: '/signup', user_id: 'user-42' });
  await tracker.event('purchase', undefined, { plan: 'pro', amount: 49.99, annual: true, items: ['a', 'b'], qty: [1, 2] });

  const result: void = await tracker.event('x');
  void result;

  // Identity: anonymousId on events, identify() with traits and options.
  await tracker.pageview({ pathname: '/', anonymousId: 'anon-1' });
  await tracker.event('signup', { user_id: 'user-42', anonymousId: 'anon-1' }, { plan: 'pro' });
  await tracker.identify('user-42');
  await tracker.identify('user-42', { plan: 'pro', seats: 5, trial: false, company: { name: 'Acme', tags: ['b2b'] }, churned_at: null });
  await tracker.identify('user-42', { plan: undefined }, { anonymousId: 'anon-1' });
  await tracker.identify('user-42', {}, { anonymousId: 'anon-1', event_id: '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a', timestamp: new Date() });
  await tracker.identify('user-42', undefined, { timestamp: Date.now() });
  const traits: Traits = { nested: { deep: [1, 'a', null, { x: true }] } };
  const value: TraitValue = traits.nested!;
  const options: IdentifyOptions = { anonymousId: 'anon-1', timestamp: '2026-01-02T03:04:05Z' };
  const identified: void = await tracker.identify('u', traits, options);
  void [value, identified];
}

function reliabilityOptions(): TrackerOptions {
  return {
    analyticsHost: 'http://127.0.0.1:3000/api',
    siteId: 1,
    apiKey: 'rb_abc',
    timeoutMs: 5000,
    maxRetries: 5,
    retryBaseDelayMs: 100,
    retryMaxDelayMs: 5000,
    throwOnError: false,
    onError: (err: TrackerError) => {
      const status: number | undefined = err.status;
      const message: string | undefined = err.serverMessage;
      const fields: Record<string, string[]> | undefined = err.details?.fieldErrors;
      const retryable: boolean = err.retryable;
      void [status, message, fields, retryable, err.code, err.eventIds];
    },
    // Annotated with WireEvent, as written before identify() existed: still accepted.
    onDrop: (event: WireEvent, reason: DropReason) => void [event.event_id, reason],
    batch: { flushAt: 100, flushInterval: 1000, maxQueueSize: 10_000 },
  };
}

function dropsOfBothKinds(): TrackerOptions {
  return {
    analyticsHost: 'http://127.0.0.1:3000/api',
    siteId: 1,
    apiKey: 'rb_abc',
    onDrop: (item, reason) => {
      // Inferred: an event or an identify call, told apart by type.
      if (item.type === 'identify') {
        const who: string = item.user_id;
        const alias: string | undefined = item.anonymous_id;
        const traits: Traits | undefined = item.traits;
        void [who, alias, traits];
      } else {
        const path: string | undefined = item.pathname;
        const anonymous: string | undefined = item.anonymous_id;
        void [path, anonymous];
      }
      const id: string = item.event_id;
      const when: string = item.timestamp;
      void [id, when, reason];
    },
  };
}

function identifyItem(item: WireEvent | WireIdentify): string {
  // @ts-expect-error user_id is optional on an event: narrow on type first
  const user: string = item.user_id;
  return user;
}

async function lifecycle(tracker: Tracker): Promise<void> {
  await tracker.flush();
  const drained: boolean = await tracker.flush(5000);
  void drained;
  await tracker.pageview({ event_id: '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a', timestamp: new Date() });
  await tracker.pageview({ timestamp: '2026-01-02T03:04:05Z' });
  await tracker.pageview({ timestamp: Date.now() });
  const myFetch: FetchFunction = (url, init) => fetch(url, init);
  new Tracker({ analyticsHost: 'http://x/api', siteId: 1, apiKey: 'rb_x', fetch: myFetch, compress: { minBytes: 2048 } });
  new Tracker({ analyticsHost: 'http://x/api', siteId: 1, apiKey: 'rb_x', fetch, compress: false });
  new Tracker({ disabled: true, analyticsHost: undefined, siteId: undefined, apiKey: process.env.RIVULET_API_KEY });
  const e: unknown = new Error('x');
  if (isTrackerError(e)) void e.code;
  const v: string = VERSION;
  void v;
  await tracker.shutdown();
  await tracker.shutdown(2000);
  const queued: number = tracker.stats().queued;
  void queued;
  new Tracker({ ...reliabilityOptions(), batch: true });
}

function wrongUsage(tracker: Tracker): void {
  // @ts-expect-error apiKey is required
  new Tracker({ analyticsHost: 'http://x/api', siteId: 1 });
  // @ts-expect-error siteId must be a string or a number
  new Tracker({ analyticsHost: 'http://x/api', siteId: true, apiKey: 'rb_x' });
  // @ts-expect-error debug is a boolean
  new Tracker({ analyticsHost: 'http://x/api', siteId: 1, apiKey: 'rb_x', debug: 'yes' });
  // @ts-expect-error eventName is required
  void tracker.event();
  // @ts-expect-error eventName is a string
  void tracker.event(42);
  // @ts-expect-error screenWidth is a number
  void tracker.pageview({ screenWidth: '1920' });
  // @ts-expect-error unknown payload fields are not part of the type
  void tracker.pageview({ pathnam: '/' });
  // @ts-expect-error property values cannot be nested objects
  void tracker.event('e', {}, { nested: { a: 1 } });
  // @ts-expect-error property arrays hold scalars only
  void tracker.event('e', {}, { deep: [[1]] });
  // @ts-expect-error pageview takes no properties
  void tracker.pageview({}, { a: 1 });
  // @ts-expect-error a timestamp is a Date, a string or a number
  void tracker.pageview({ timestamp: true });
  // @ts-expect-error compress is a boolean or { minBytes }
  new Tracker({ analyticsHost: 'http://x/api', siteId: 1, apiKey: 'rb_x', compress: 'gzip' });
  // @ts-expect-error unknown batch option
  new Tracker({ analyticsHost: 'http://x/api', siteId: 1, apiKey: 'rb_x', batch: { size: 5 } });
  // @ts-expect-error userId is required
  void tracker.identify();
  // @ts-expect-error userId is a string
  void tracker.identify(42);
  // @ts-expect-error traits are an object, not a list
  void tracker.identify('u', ['plan']);
  // @ts-expect-error trait values are JSON values: no functions
  void tracker.identify('u', { f: () => 1 });
  // @ts-expect-error trait values are JSON values: no Dates (send date.toISOString())
  void tracker.identify('u', { signedUpAt: new Date() });
  // @ts-expect-error anonymousId is a string
  void tracker.identify('u', {}, { anonymousId: 42 });
  // @ts-expect-error the payload name is anonymousId (sent as anonymous_id)
  void tracker.pageview({ anonymous_id: 'anon-1' });
  // @ts-expect-error unknown identify option
  void tracker.identify('u', {}, { context: {} });
  // @ts-expect-error an identify timestamp is a Date, a string or a number
  void tracker.identify('u', {}, { timestamp: true });
  const p: Payload = {};
  const props: EventProperties = { ok: 'yes' };
  void [p, props];
}

void [specExamples, lifecycle, wrongUsage, dropsOfBothKinds, identifyItem];
