import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { Tracker, TrackerError, type Payload } from 'rivulet-node';
import { API_KEY, startServer, type TestServer } from '../helpers/server.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

// Every field sent under its own name; anonymousId (sent as anonymous_id) has its own tests.
const fullPayload: Required<Omit<Payload, 'event_id' | 'timestamp' | 'anonymousId'>> = {
  hostname: 'example.com',
  pathname: '/pricing',
  querystring: '?utm_source=newsletter',
  screenWidth: 1920,
  screenHeight: 1080,
  language: 'en',
  page_title: 'Pricing',
  referrer: 'https://google.com/',
  user_id: 'user-42',
  user_agent: 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36',
  ip_address: '81.2.69.142',
};

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(() => server.close());
beforeEach(() => {
  server.requests.length = 0;
});

function tracker(extra: Record<string, unknown> = {}): Tracker {
  return new Tracker({ analyticsHost: server.host, siteId: '1', apiKey: API_KEY, throwOnError: true, maxRetries: 0, ...extra });
}

/** The call must reject with an invalid_event TrackerError matching `pattern`, and send nothing. */
async function invalid(call: Promise<void>, pattern: RegExp): Promise<void> {
  await assert.rejects(call, (err: unknown) => {
    assert.ok(err instanceof TrackerError);
    assert.equal(err.code, 'invalid_event');
    assert.equal(err.status, undefined);
    assert.equal(err.retryable, false);
    assert.match(err.message, pattern);
    return true;
  });
  assert.equal(server.requests.length, 0, 'no request for an invalid event');
}

describe('wire format of single events', () => {
  test('pageview: POST {analyticsHost}/track with every payload field', async () => {
    const before = Date.now();
    await tracker().pageview(fullPayload);
    assert.equal(server.requests.length, 1);
    const req = server.requests[0]!;
    assert.equal(req.method, 'POST');
    assert.equal(req.path, '/api/track');
    assert.match(String(req.headers['content-type']), /^application\/json/);
    const { event_id, timestamp, sent_at, ...rest } = req.json;
    assert.deepEqual(rest, { api_key: API_KEY, site_id: '1', type: 'pageview', ...fullPayload });
    assert.match(event_id, UUID);
    const ts = Date.parse(timestamp);
    assert.equal(new Date(ts).toISOString(), timestamp, 'timestamp is an ISO string');
    assert.ok(ts >= before - 1 && ts <= Date.now() + 1, 'timestamp taken when the call is made');
    // sent_at: when the request was sent, by the same clock, last in the body.
    const sent = Date.parse(sent_at);
    assert.equal(new Date(sent).toISOString(), sent_at, 'sent_at is an ISO string');
    assert.ok(sent >= ts && sent <= req.at, 'sent_at taken when the request is sent');
    assert.equal(Object.keys(req.json).at(-1), 'sent_at');
  });

  test('custom event: event_name and properties as a JSON string; site_id as given', async () => {
    const props = { plan: 'pro', seats: 5, trial: false, tags: ['a', 'b'], scores: [1, 2.5], mixed: ['x', 1, true] };
    await tracker({ siteId: 7, analyticsHost: `${server.host}/` }).event('signup', { pathname: '/signup' }, props);
    const req = server.requests[0]!;
    assert.equal(req.path, '/api/track', 'a trailing slash of analyticsHost is stripped');
    assert.equal(req.json.site_id, 7, 'a numeric siteId stays a number');
    assert.equal(req.json.type, 'custom_event');
    assert.equal(req.json.event_name, 'signup');
    assert.equal(typeof req.json.properties, 'string');
    assert.equal(req.json.properties, JSON.stringify(props));
    assert.equal(req.json.pathname, '/signup');
  });

  test('event without payload or properties; null payload fields are not sent', async () => {
    const t = tracker();
    await t.event('click');
    await t.pageview({ pathname: '/', page_title: undefined, referrer: null as never });
    assert.deepEqual(Object.keys(server.requests[0]!.json).sort(), ['api_key', 'event_id', 'event_name', 'sent_at', 'site_id', 'timestamp', 'type']);
    assert.deepEqual(Object.keys(server.requests[1]!.json).sort(), ['api_key', 'event_id', 'pathname', 'sent_at', 'site_id', 'timestamp', 'type']);
  });

  test('unknown payload fields are not sent', async () => {
    await tracker().pageview({ pathname: '/', api_key: 'rb_other', type: 'custom_event', foo: 1 } as Payload);
    const body = server.requests[0]!.json;
    assert.equal(body.api_key, API_KEY);
    assert.equal(body.type, 'pageview');
    assert.equal('foo' in body, false);
  });

  test('anonymousId is sent as anonymous_id, on pageviews and custom events, single and batch', async () => {
    const t = tracker();
    await t.pageview({ pathname: '/', user_id: 'user-42', anonymousId: 'anon-1' });
    await t.event('signup', { anonymousId: 'anon-2' }, { plan: 'pro' });
    const batch = tracker({ batch: true, throwOnError: false });
    await batch.pageview({ anonymousId: 'anon-3' });
    await batch.shutdown();
    const [pageview, event, batched] = server.requests;
    assert.equal(pageview!.json.anonymous_id, 'anon-1');
    assert.equal(pageview!.json.user_id, 'user-42');
    assert.equal(event!.json.anonymous_id, 'anon-2');
    assert.equal(batched!.json.events[0].anonymous_id, 'anon-3');
    for (const body of [pageview!.json, event!.json, batched!.json.events[0]]) assert.equal('anonymousId' in body, false, 'only the wire name is sent');
  });

  test('an empty anonymousId is the same as none: not sent', async () => {
    await tracker().pageview({ anonymousId: '' });
    assert.equal('anonymous_id' in server.requests[0]!.json, false);
  });

  test('every call gets a fresh event_id', async () => {
    const t = tracker();
    await t.pageview();
    await t.pageview();
    assert.notEqual(server.requests[0]!.json.event_id, server.requests[1]!.json.event_id);
  });
});

describe('payload validation (before any request)', () => {
  const limits: [keyof Payload, number][] = [
    ['page_title', 512],
    ['referrer', 2048],
    ['user_id', 255],
    ['anonymousId', 255],
    ['user_agent', 512],
    ['pathname', 2048],
    ['hostname', 253],
    ['querystring', 2048],
    ['language', 35],
  ];
  for (const [field, max] of limits) {
    test(`${field}: ${max} characters pass, ${max + 1} fail`, async () => {
      // "é" is one character: limits count characters, not bytes.
      await tracker().pageview({ [field]: 'é'.repeat(max) });
      assert.equal(server.requests.length, 1);
      server.requests.length = 0;
      await invalid(tracker().pageview({ [field]: 'é'.repeat(max + 1) }), new RegExp(`payload\\.${field} must be at most ${max} characters`));
    });
  }

  test('characters outside the BMP count once', async () => {
    await tracker().pageview({ user_id: '😀'.repeat(255) });
    assert.equal(server.requests.length, 1);
  });

  test('event_name: required, a string, at most 256 characters', async () => {
    await invalid(tracker().event(''), /non-empty eventName/);
    await invalid(tracker().event(undefined as never), /non-empty eventName/);
    await invalid(tracker().event(42 as never), /eventName must be a string/);
    await invalid(tracker().event('x'.repeat(257)), /eventName must be at most 256 characters/);
    await tracker().event('x'.repeat(256));
    assert.equal(server.requests.length, 1);
  });

  test('properties over 2048 characters fail before any request', async () => {
    // {"k":"…"} is 8 characters plus the value.
    await tracker().event('e', {}, { k: 'v'.repeat(2040) });
    assert.equal(server.requests.length, 1);
    server.requests.length = 0;
    await invalid(tracker().event('e', {}, { k: 'v'.repeat(2041) }), /properties must be at most 2048 characters as JSON \(got 2049\)/);
  });

  test('property values: string, number, boolean or arrays of those', async () => {
    await invalid(tracker().event('e', {}, { nested: { a: 1 } } as never), /properties\.nested must be a string/);
    await invalid(tracker().event('e', {}, { deep: [[1]] } as never), /properties\.deep/);
    await invalid(tracker().event('e', {}, { n: null } as never), /properties\.n/);
    await invalid(tracker().event('e', {}, { d: new Date() } as never), /properties\.d/);
    await invalid(tracker().event('e', {}, { nan: Number.NaN }), /properties\.nan/);
    await invalid(tracker().event('e', {}, { inf: [Infinity] }), /properties\.inf/);
    await invalid(tracker().event('e', {}, ['a'] as never), /properties must be a plain object/);
    await invalid(tracker().event('e', {}, 'a=1' as never), /properties must be a plain object/);
  });

  test('undefined property values are left out, as JSON.stringify does', async () => {
    await tracker().event('e', {}, { a: 1, b: undefined } as never);
    assert.equal(server.requests[0]!.json.properties, '{"a":1}');
  });

  test('payload field types', async () => {
    await invalid(tracker().pageview('/' as never), /payload must be a plain object/);
    await invalid(tracker().pageview({ pathname: 5 } as never), /payload\.pathname must be a string/);
    await invalid(tracker().pageview({ anonymousId: 42 } as never), /payload\.anonymousId must be a string/);
    await invalid(tracker().pageview({ screenWidth: '1920' } as never), /payload\.screenWidth must be a number from 0 to 65535/);
    await invalid(tracker().pageview({ screenHeight: 70000 }), /payload\.screenHeight must be a number from 0 to 65535/);
    await invalid(tracker().pageview({ screenHeight: Number.NaN }), /screenHeight/);
    await invalid(tracker().pageview({ ip_address: '999.1.1.1' }), /payload\.ip_address must be an IPv4 or IPv6 address/);
    await tracker().pageview({ ip_address: '2001:218::1', screenWidth: 0 });
    assert.equal(server.requests.length, 1);
  });

  test('without throwOnError an invalid event goes to onError and the promise resolves', async () => {
    const errors: TrackerError[] = [];
    const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, onError: (e) => errors.push(e) });
    await t.pageview({ page_title: 'x'.repeat(600) });
    assert.equal(errors.length, 1);
    assert.equal(errors[0]!.code, 'invalid_event');
    assert.equal(server.requests.length, 0);
  });
});
