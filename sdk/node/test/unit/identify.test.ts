// identify(): the request on the wire, its checks before any request, and its delivery
// (retries with the same event_id and timestamp, the batch queue, onDrop, shutdown).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Tracker, TrackerError, type DropReason, type TrackerOptions, type Traits, type WireEvent, type WireIdentify } from 'rivulet-node';
import { API_KEY, acceptAll, captureConsole, reply, sleep, startServer, type Handler, type Received, type TestServer } from '../helpers/server.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function withServer(handler: Handler, fn: (s: TestServer) => Promise<void>): Promise<void> {
  const server = await startServer(handler);
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

const accept: Handler = (req, res) => reply(res, 200, req.path.endsWith('/batch') ? acceptAll(req) : { success: true });

function single(server: TestServer, extra: Partial<TrackerOptions> = {}): Tracker {
  return new Tracker({ analyticsHost: server.host, siteId: '1', apiKey: API_KEY, throwOnError: true, maxRetries: 0, ...extra });
}

interface Recorder {
  drops: [WireEvent | WireIdentify, DropReason][];
  errors: TrackerError[];
}

function batchTracker(server: TestServer, extra: Partial<TrackerOptions> = {}): Tracker & Recorder {
  const rec: Recorder = { drops: [], errors: [] };
  const t = new Tracker({
    analyticsHost: server.host,
    siteId: '1',
    apiKey: API_KEY,
    retryBaseDelayMs: 1,
    batch: { flushInterval: 60_000 },
    onDrop: (item, reason) => rec.drops.push([item, reason]),
    onError: (e) => rec.errors.push(e),
    ...extra,
  });
  return Object.assign(t, rec);
}

const identifies = (s: TestServer): Received[] => s.requests.filter((r) => r.path === '/api/identify');

/** The call must reject with an invalid_event TrackerError matching `pattern`. */
async function invalid(call: Promise<void>, pattern: RegExp): Promise<void> {
  await assert.rejects(call, (err: unknown) => {
    assert.ok(err instanceof TrackerError);
    assert.equal(err.code, 'invalid_event');
    assert.equal(err.status, undefined);
    assert.equal(err.retryable, false);
    assert.equal(err.attempts, 0);
    assert.match(err.message, pattern);
    return true;
  });
}

describe('identify: the request', () => {
  test('POST {analyticsHost}/identify with the key in the body, no Authorization header', async () => {
    await withServer(accept, async (server) => {
      const before = Date.now();
      await single(server).identify('user-42', { plan: 'pro', seats: 5, company: { name: 'Acme', tags: ['b2b'] } }, { anonymousId: 'anon-7' });
      assert.equal(server.requests.length, 1);
      const req = server.requests[0]!;
      assert.equal(req.method, 'POST');
      assert.equal(req.path, '/api/identify');
      assert.match(String(req.headers['content-type']), /^application\/json/);
      assert.equal(req.headers.authorization, undefined, 'the key stays in the body, as for events');
      assert.match(String(req.headers['user-agent']), /^rivulet-node\//);
      // The contract's field order: api_key, site_id, user_id, anonymous_id, traits, event_id, timestamp.
      assert.deepEqual(Object.keys(req.json), ['api_key', 'site_id', 'user_id', 'anonymous_id', 'traits', 'event_id', 'timestamp']);
      const { event_id, timestamp, ...rest } = req.json;
      assert.deepEqual(rest, {
        api_key: API_KEY,
        site_id: '1',
        user_id: 'user-42',
        anonymous_id: 'anon-7',
        traits: { plan: 'pro', seats: 5, company: { name: 'Acme', tags: ['b2b'] } },
      });
      assert.match(event_id, UUID);
      const ts = Date.parse(timestamp);
      assert.equal(new Date(ts).toISOString(), timestamp, 'timestamp is an ISO string');
      assert.ok(ts >= before - 1 && ts <= Date.now() + 1, 'timestamp taken when the call is made');
      assert.equal('type' in req.json, false, 'type is not part of the identify body');
    });
  });

  test('only user_id is needed; traits and anonymous_id are not sent when not given', async () => {
    await withServer(accept, async (server) => {
      const t = single(server, { siteId: 7 });
      await t.identify('user-42');
      await t.identify('user-42', undefined, { anonymousId: '' }); // empty: the same as none
      await t.identify('user-42', null as never, null as never);
      for (const req of server.requests) {
        assert.deepEqual(Object.keys(req.json), ['api_key', 'site_id', 'user_id', 'event_id', 'timestamp']);
        assert.equal(req.json.site_id, 7, 'a numeric siteId stays a number');
      }
      assert.notEqual(server.requests[0]!.json.event_id, server.requests[1]!.json.event_id, 'a fresh event_id per call');
    });
  });

  test('a null trait is sent as null (it removes the trait); undefined traits are left out', async () => {
    await withServer(accept, async (server) => {
      await single(server).identify('u', { plan: null, company: 'Acme', nested: { keep: null }, gone: undefined });
      assert.equal(server.requests[0]!.body.includes('"traits":{"plan":null,"company":"Acme","nested":{"keep":null}}'), true, server.requests[0]!.body);
    });
  });

  test("the caller's event_id and timestamp are sent as given", async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      const id = '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a';
      await t.identify('u', {}, { event_id: id, timestamp: new Date('2026-01-02T03:04:05.678Z') });
      await t.identify('u', {}, { timestamp: '2026-01-02T04:04:05+01:00' });
      await t.identify('u', {}, { timestamp: 1_767_323_045_678 });
      assert.equal(server.requests[0]!.json.event_id, id);
      assert.deepEqual(server.requests.map((r) => r.json.timestamp), ['2026-01-02T03:04:05.678Z', '2026-01-02T04:04:05+01:00', '2026-01-02T03:04:05.678Z']);
    });
  });

  test('a disabled tracker checks the call and sends nothing', async () => {
    const t = new Tracker({ disabled: true, analyticsHost: undefined, siteId: undefined, apiKey: undefined, throwOnError: true });
    await t.identify('u', { plan: 'pro' });
    await invalid(t.identify(''), /non-empty userId/);
  });
});

describe('identify: checks before any request', () => {
  test('userId: required, a string, at most 255 characters', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      await invalid(t.identify(undefined as never), /identify\(userId\) needs a non-empty userId string/);
      await invalid(t.identify(''), /non-empty userId/);
      await invalid(t.identify(42 as never), /userId must be a string \(got 42\)/);
      await invalid(t.identify('é'.repeat(256)), /userId must be at most 255 characters \(got 256\)/);
      await t.identify('é'.repeat(255));
      assert.equal(server.requests.length, 1);
    });
  });

  test('options.anonymousId: a string of at most 255 characters', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      await invalid(t.identify('u', {}, { anonymousId: 'é'.repeat(256) }), /options\.anonymousId must be at most 255 characters/);
      await invalid(t.identify('u', {}, { anonymousId: 7 } as never), /options\.anonymousId must be a string/);
      await invalid(t.identify('u', {}, 'anon' as never), /identify options must be a plain object/);
      await t.identify('u', {}, { anonymousId: 'é'.repeat(255) });
      assert.equal(server.requests.length, 1);
    });
  });

  test('options.event_id and options.timestamp follow the rules of event payloads', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      await invalid(t.identify('u', {}, { event_id: 'not-a-uuid' }), /options\.event_id must be a UUID string/);
      await invalid(t.identify('u', {}, { event_id: '00000000-0000-0000-0000-000000000000' }), /options\.event_id must be a UUID/);
      await invalid(t.identify('u', {}, { timestamp: 'yesterday' }), /options\.timestamp must be/);
      await invalid(t.identify('u', {}, { timestamp: 1.5 }), /options\.timestamp must be/);
      await invalid(t.identify('u', {}, { timestamp: new Date(Number.NaN) }), /options\.timestamp must be/);
      assert.equal(server.requests.length, 0);
    });
  });

  test('traits: a plain object of at most 2048 characters as JSON', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      // {"k":"…"} is 8 characters plus the value; "é" is one character: the limit counts characters.
      await t.identify('u', { k: 'é'.repeat(2040) });
      assert.equal(server.requests.length, 1);
      await invalid(t.identify('u', { k: 'é'.repeat(2041) }), /traits must be at most 2048 characters as JSON \(got 2049\)/);
      await invalid(t.identify('u', ['a'] as never), /traits must be a plain object \(got an array\)/);
      await invalid(t.identify('u', 'plan=pro' as never), /traits must be a plain object/);
      await invalid(t.identify('u', new Map([['a', 1]]) as never), /traits must be a plain object/);
      assert.equal(server.requests.length, 1, 'no request for invalid traits');
    });
  });

  test('trait values: any JSON value; what JSON.stringify would change fails', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      const cyclic: Record<string, unknown> = {};
      cyclic.self = cyclic;
      let deep: unknown = 1;
      for (let i = 0; i < 5000; i++) deep = [deep];
      const cases: [unknown, RegExp][] = [
        [{ n: Number.NaN }, /traits\.n must be a finite number \(got NaN\)/],
        [{ n: [1, Infinity] }, /traits\.n\[1\] must be a finite number/],
        [{ a: [1, undefined] }, /traits\.a\[1\] is undefined/],
        [{ a: [1, , 3] }, /traits\.a\[1\] is undefined/], // a hole
        [{ d: new Date() }, /traits\.d must be a JSON value.*\(got a Date\); pass date\.toISOString\(\)/],
        [{ m: { inner: new Map() } }, /traits\.m\.inner must be a JSON value.*\(got a Map\)/],
        [{ f: () => 1 }, /traits\.f must be a JSON value.*\(got a function\)/],
        [{ b: 10n }, /traits\.b must be a JSON value.*\(got a bigint\)/],
        [{ s: Symbol('x') }, /traits\.s must be a JSON value.*\(got a symbol\)/],
        [cyclic, /traits\.self contains itself \(a cycle\)/],
        [{ deep }, /traits must be at most 2048 characters as JSON \(nested over 1024 levels deep\)/],
      ];
      for (const [traits, pattern] of cases) await invalid(t.identify('u', traits as Traits), pattern);
      assert.equal(server.requests.length, 0);
      await t.identify('u', { s: 'x', n: -1.5, b: false, z: null, list: [1, 'a', null, { x: [true] }], obj: { a: { b: { c: 1 } } }, empty: {} });
      assert.deepEqual(server.requests[0]!.json.traits, { s: 'x', n: -1.5, b: false, z: null, list: [1, 'a', null, { x: [true] }], obj: { a: { b: { c: 1 } } }, empty: {} });
    });
  });

  test('without throwOnError an invalid call goes to onError and the promise resolves', async () => {
    await withServer(accept, async (server) => {
      const errors: TrackerError[] = [];
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, onError: (e) => errors.push(e) });
      await t.identify('u', { k: 'v'.repeat(3000) });
      assert.equal(errors.length, 1);
      assert.equal(errors[0]!.code, 'invalid_event');
      assert.equal(server.requests.length, 0);
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 0, failed: 0 }, 'a call that fails its checks is not counted, as for events');
    });
  });
});

describe('identify: delivery, single mode', () => {
  test('503, 429 and network errors are retried with the same body: same event_id and timestamp', async () => {
    await withServer(
      (req, res, i) => {
        if (i === 0) return reply(res, 503, { success: false, error: 'Service unavailable' }, { 'retry-after': '0' });
        if (i === 1) return reply(res, 429, { success: false, error: 'Rate limit exceeded.' }, { 'retry-after': '0' });
        if (i === 2) return void req; // no answer: the client times out
        reply(res, 200, { success: true });
      },
      async (server) => {
        const t = single(server, { maxRetries: 3, retryBaseDelayMs: 1, timeoutMs: 200 });
        await t.identify('user-42', { plan: 'pro' }, { anonymousId: 'anon-1' });
        assert.equal(server.requests.length, 4);
        const bodies = new Set(server.requests.map((r) => r.body));
        assert.equal(bodies.size, 1, 'every attempt sends the same bytes');
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 1, failed: 0 });
      },
    );
  });

  test('a Retry-After longer than retryMaxDelayMs is waited for', async () => {
    await withServer(
      (_req, res, i) => (i === 0 ? reply(res, 429, { success: false }, { 'retry-after': '1' }) : reply(res, 200, { success: true })),
      async (server) => {
        await single(server, { maxRetries: 1, retryMaxDelayMs: 10 }).identify('u');
        assert.equal(server.requests.length, 2);
        assert.ok(server.requests[1]!.at - server.requests[0]!.at >= 950);
      },
    );
  });

  test('400 is not retried; the error carries status, serverMessage and details', async () => {
    const details = { fieldErrors: { traits: ['must be at most 2048 characters as JSON'] }, formErrors: [] };
    await withServer(
      (_req, res) => reply(res, 400, { success: false, error: 'Invalid payload', details }),
      async (server) => {
        const t = single(server, { maxRetries: 3, retryBaseDelayMs: 1 });
        await assert.rejects(t.identify('u', { a: 1 }), (err: unknown) => {
          assert.ok(err instanceof TrackerError);
          assert.equal(err.code, 'http');
          assert.equal(err.status, 400);
          assert.equal(err.retryable, false);
          assert.equal(err.serverMessage, 'Invalid payload');
          assert.deepEqual(err.details, details);
          assert.match(err.message, /POST .*\/api\/identify answered 400: Invalid payload - traits: must be at most 2048/);
          assert.deepEqual(err.eventIds, [server.requests[0]!.json.event_id]);
          return true;
        });
        assert.equal(server.requests.length, 1);
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 0, failed: 1 });
      },
    );
  });

  test('without throwOnError a failure goes to onError once retries are used up; the promise resolves', async () => {
    await withServer(
      (_req, res) => reply(res, 503, { success: false }, { 'retry-after': '0' }),
      async (server) => {
        const errors: TrackerError[] = [];
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, maxRetries: 2, retryBaseDelayMs: 1, onError: (e) => errors.push(e) });
        await t.identify('u');
        assert.equal(server.requests.length, 3);
        assert.equal(errors.length, 1);
        assert.equal(errors[0]!.status, 503);
        assert.equal(errors[0]!.attempts, 3);
        assert.equal(errors[0]!.retryable, true);
      },
    );
  });

  test('flush() waits for an identify in flight; after shutdown() identify fails with code shutdown', async () => {
    await withServer(
      (req, res) => void setTimeout(() => accept(req, res, 0), 200),
      async (server) => {
        const t = single(server);
        const call = t.identify('u');
        assert.equal(await t.flush(), true);
        assert.equal(t.stats().delivered, 1);
        await call;
        await t.shutdown();
        await assert.rejects(t.identify('u'), { name: 'TrackerError', code: 'shutdown', message: /identify call not sent/ });
        assert.equal(server.requests.length, 1);
      },
    );
  });

  test('debug logs show the request without the API key', async () => {
    await withServer(accept, async (server) => {
      const lines = await captureConsole('log', () => single(server, { debug: true }).identify('u', { plan: 'pro' }, { vip: true } as never));
      const text = lines.join('\n');
      assert.match(text, /-> POST .*\/api\/identify \(attempt 1\) .*"user_id":"u"/);
      assert.match(text, /not sent, unknown identify options: vip/);
      assert.ok(!text.includes(API_KEY));
    });
  });
});

describe('identify: delivery, batch mode', () => {
  test('queued with the events, in order, but never inside a /track/batch body: a request of its own', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server);
      await t.pageview({ pathname: '/before-1', anonymousId: 'anon-1' });
      await t.pageview({ pathname: '/before-2', anonymousId: 'anon-1' });
      await t.identify('user-42', { plan: 'pro' }, { anonymousId: 'anon-1' });
      await t.event('after', { user_id: 'user-42' });
      assert.equal(server.requests.length, 0, 'queued: nothing sent before the flush');
      assert.equal(t.stats().queued, 4);
      await t.flush();
      assert.deepEqual(server.requests.map((r) => r.path), ['/api/track/batch', '/api/identify', '/api/track/batch']);
      assert.deepEqual(server.requests[0]!.json.events.map((e: WireEvent) => e.pathname), ['/before-1', '/before-2']);
      assert.equal(server.requests[1]!.json.user_id, 'user-42');
      assert.equal(server.requests[1]!.json.anonymous_id, 'anon-1');
      assert.deepEqual(server.requests[2]!.json.events.map((e: WireEvent) => e.event_name), ['after']);
      for (const r of server.requests.filter((x) => x.path.endsWith('/batch'))) {
        assert.ok(r.json.events.every((e: Record<string, unknown>) => !('traits' in e)), 'no identify inside a batch');
      }
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 4, failed: 0 });
      await t.shutdown();
    });
  });

  test('the id, timestamp and traits are fixed at the call: a later change of the object is not sent', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server);
      const traits: Traits = { plan: 'free' };
      const before = Date.now();
      await t.identify('u', traits);
      traits.plan = 'pro';
      await sleep(50);
      await t.flush();
      const req = identifies(server)[0]!;
      assert.deepEqual(req.json.traits, { plan: 'free' });
      assert.ok(Date.parse(req.json.timestamp) - before < 40, 'the time of the call, not of the flush');
      await t.shutdown();
    });
  });

  test('retries resend the same event_id and timestamp; 429 does not use up retries, as for batches', async () => {
    let n = 0;
    await withServer(
      (req, res, i) => {
        if (req.path !== '/api/identify') return accept(req, res, i);
        n++;
        if (n <= 4) return reply(res, 429, { success: false, error: 'Rate limit exceeded.' }, { 'retry-after': '0' });
        if (n === 5) return reply(res, 503, { success: false }, { 'retry-after': '0' });
        reply(res, 200, { success: true });
      },
      async (server) => {
        const t = batchTracker(server, { maxRetries: 1 });
        await t.identify('u', { plan: 'pro' });
        await t.flush();
        const sent = identifies(server);
        assert.equal(sent.length, 6, 'four 429s, one 503 (the one retry), then 200');
        assert.equal(new Set(sent.map((r) => r.body)).size, 1, 'the same body every time');
        assert.deepEqual(t.drops, []);
        assert.deepEqual(t.errors, []);
        assert.equal(t.stats().delivered, 1);
        await t.shutdown();
      },
    );
  });

  test('a 400 is not retried: onError, and onDrop(call, "invalid") with the call as sent', async () => {
    await withServer(
      (req, res, i) =>
        req.path === '/api/identify'
          ? reply(res, 400, { success: false, error: 'Invalid payload', details: { fieldErrors: { user_id: ['bad'] }, formErrors: [] } })
          : accept(req, res, i),
      async (server) => {
        const t = batchTracker(server);
        await t.identify('u', { plan: null }, { anonymousId: 'a' });
        await t.pageview();
        await t.flush();
        assert.equal(identifies(server).length, 1);
        assert.equal(t.drops.length, 1);
        const [item, reason] = t.drops[0]!;
        assert.equal(reason, 'invalid');
        assert.equal(item.type, 'identify');
        const sent = identifies(server)[0]!.json;
        assert.deepEqual(item, { type: 'identify', event_id: sent.event_id, timestamp: sent.timestamp, user_id: 'u', anonymous_id: 'a', traits: { plan: null } });
        assert.equal(t.errors.length, 1);
        assert.equal(t.errors[0]!.status, 400);
        assert.deepEqual(t.errors[0]!.eventIds, [sent.event_id]);
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 1, failed: 1 }, 'the pageview after it was delivered');
        await t.shutdown();
      },
    );
  });

  test('401/404 and retries used up: onDrop(call, "failed")', async () => {
    for (const status of [401, 404, 503]) {
      await withServer(
        (_req, res) => reply(res, status, { success: false, error: 'nope' }, { 'retry-after': '0' }),
        async (server) => {
          const t = batchTracker(server, { maxRetries: 2 });
          await t.identify('u');
          await t.flush();
          assert.equal(server.requests.length, status === 503 ? 3 : 1, `${status}`);
          assert.deepEqual(t.drops.map(([i, r]) => [i.type, r]), [['identify', 'failed']]);
          assert.equal(t.errors[0]!.status, status);
          await t.shutdown();
        },
      );
    }
  });

  test('shutdown() delivers a queued identify; one after shutdown is dropped with "shutdown"', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server);
      await t.identify('u');
      await t.shutdown();
      assert.equal(identifies(server).length, 1);
      await t.identify('late');
      assert.deepEqual(t.drops.map(([i, r]) => [i.type, r]), [['identify', 'shutdown']]);
      assert.equal(t.errors[0]!.code, 'shutdown');
      const throwing = batchTracker(server, { throwOnError: true });
      await throwing.shutdown();
      await assert.rejects(throwing.identify('late'), { code: 'shutdown' });
    });
  });

  test('shutdown(timeoutMs) gives up on a server that does not answer: the identify is dropped with "shutdown"', async () => {
    await withServer(
      () => {}, // never answers
      async (server) => {
        const t = batchTracker(server);
        await t.identify('u');
        await t.shutdown(200);
        assert.deepEqual(t.drops.map(([i, r]) => [i.type, r]), [['identify', 'shutdown']]);
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 0, failed: 1 });
      },
    );
  });

  test('a full queue drops an identify like an event: onDrop(call, "queue_full")', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { batch: { flushInterval: 60_000, flushAt: 1000, maxQueueSize: 2 } });
      await t.pageview();
      await t.pageview();
      await t.identify('u');
      assert.deepEqual(t.drops.map(([i, r]) => [i.type, r]), [['identify', 'queue_full']]);
      assert.equal(t.errors[0]!.code, 'queue_full');
      await t.shutdown();
      assert.equal(identifies(server).length, 0);
    });
  });

  test('an invalid identify is reported at the call and never queued', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { throwOnError: true });
      await invalid(t.identify('u', { d: new Date() } as never), /traits\.d/);
      assert.equal(t.stats().queued, 0);
      await t.shutdown();
      assert.equal(server.requests.length, 0);
    });
  });
});
