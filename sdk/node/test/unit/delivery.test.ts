// How batches and single events get delivered when the server is busy, limited or slow:
// per-event 503 results, 413 and "too many events", Retry-After pauses, 408, 429.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Tracker, TrackerError, type DropReason, type TrackerOptions, type WireEvent, type WireIdentify } from 'rivulet-node';
import { API_KEY, acceptAll, reply, startServer, type Handler, type Received, type TestServer } from '../helpers/server.js';

async function withServer(handler: Handler, fn: (s: TestServer) => Promise<void>): Promise<void> {
  const server = await startServer(handler);
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

/** The pathname of a dropped event (identify calls have none). */
const pathOf = (e: WireEvent | WireIdentify): string | undefined => (e.type === 'identify' ? undefined : e.pathname);

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
    batch: { flushInterval: 60_000, flushAt: 10_000 },
    onDrop: (ev, reason) => rec.drops.push([ev, reason]),
    onError: (e) => rec.errors.push(e),
    ...extra,
  });
  return Object.assign(t, rec);
}

const idsOf = (req: Received): string[] => (req.json.events as WireEvent[]).map((e) => e.event_id);

/** A 503 answer with per-event results: the events whose index is in `failed` could not be stored. */
function partial503(req: Received, failed: (i: number, ev: WireEvent) => boolean, invalid: (i: number) => boolean = () => false): object {
  const events = req.json.events as WireEvent[];
  const results = events.map((e, i) =>
    invalid(i)
      ? { status: 'invalid', error: 'Invalid payload', details: { fieldErrors: { x: ['bad'] }, formErrors: [] } }
      : failed(i, e)
        ? { status: 'failed', event_id: e.event_id, error: 'Kafka unavailable' }
        : { status: 'accepted', event_id: e.event_id },
  );
  return {
    success: false,
    accepted: results.filter((r) => r.status === 'accepted').length,
    rejected: results.filter((r) => r.status === 'invalid').length,
    failed: results.filter((r) => r.status === 'failed').length,
    results,
  };
}

describe('503 with per-event results', () => {
  test('only the failed events are sent again; accepted ones count as delivered once', async () => {
    await withServer(
      (req, res, i) => {
        if (i === 0) return reply(res, 503, partial503(req, (j) => j % 2 === 1, (j) => j === 4), { 'retry-after': '0' });
        reply(res, 200, acceptAll(req));
      },
      async (server) => {
        const t = batchTracker(server);
        for (let i = 0; i < 6; i++) await t.pageview({ pathname: `/${i}` });
        await t.flush();
        assert.equal(server.requests.length, 2);
        const first = idsOf(server.requests[0]!);
        assert.deepEqual(idsOf(server.requests[1]!), [first[1], first[3], first[5]], 'the failed ones, same ids, in order');
        const resent = server.requests[1]!.json.events as WireEvent[];
        const original = server.requests[0]!.json.events as WireEvent[];
        assert.deepEqual(resent, [original[1], original[3], original[5]], 'same events byte for byte (timestamps too)');
        assert.deepEqual(t.drops.map(([e, r]) => [pathOf(e), r]), [['/4', 'invalid']]);
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 5, failed: 1 });
        await t.shutdown();
      },
    );
  });

  test('once retries run out, only the events that still failed are dropped', async () => {
    await withServer(
      (req, res) => reply(res, 503, partial503(req, (_j, e) => e.pathname === '/2'), { 'retry-after': '0' }),
      async (server) => {
        const t = batchTracker(server, { maxRetries: 2 });
        for (let i = 0; i < 4; i++) await t.pageview({ pathname: `/${i}` });
        await t.flush();
        assert.equal(server.requests.length, 3, 'first attempt + 2 retries');
        assert.deepEqual(server.requests.map((r) => r.json.events.length), [4, 1, 1]);
        assert.deepEqual(t.drops.map(([e, r]) => [pathOf(e), r]), [['/2', 'failed']]);
        assert.equal(t.errors.length, 1);
        assert.equal(t.errors[0]!.status, 503);
        assert.deepEqual(t.errors[0]!.eventIds, [t.drops[0]![0].event_id]);
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 3, failed: 1 });
        await t.shutdown();
      },
    );
  });

  test('a 503 without per-event results retries the whole batch', async () => {
    await withServer(
      (req, res, i) => (i === 0 ? reply(res, 503, { success: false, error: 'Service unavailable' }, { 'retry-after': '0' }) : reply(res, 200, acceptAll(req))),
      async (server) => {
        const t = batchTracker(server);
        for (let i = 0; i < 3; i++) await t.pageview();
        await t.flush();
        assert.deepEqual(server.requests.map((r) => r.json.events.length), [3, 3]);
        assert.deepEqual(t.stats().delivered, 3);
        await t.shutdown();
      },
    );
  });

  test('a result status other than "accepted" in a 200 answer is a rejection (there is no "duplicate")', async () => {
    await withServer(
      (req, res) => {
        const events = req.json.events as WireEvent[];
        reply(res, 200, { success: false, results: events.map((e) => ({ status: 'duplicate', event_id: e.event_id })) });
      },
      async (server) => {
        const t = batchTracker(server);
        await t.pageview();
        await t.flush();
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 0, failed: 1 });
        assert.deepEqual(t.drops.map(([, r]) => r), ['invalid']);
        await t.shutdown();
      },
    );
  });
});

describe('a server with lower batch limits', () => {
  test('413: the batch is halved until it fits, nothing is lost, and later batches stay small', async () => {
    const LIMIT = 20_000; // bytes this server takes per body, after decoding
    await withServer(
      (req, res) => (Buffer.byteLength(req.body) > LIMIT ? reply(res, 413, { success: false, error: 'Payload too large' }) : reply(res, 200, acceptAll(req))),
      async (server) => {
        const t = batchTracker(server, { compress: false });
        for (let i = 0; i < 300; i++) void t.event('e', { pathname: `/${i}`, page_title: 't'.repeat(100) });
        await t.flush();
        const accepted = server.requests.filter((r) => Buffer.byteLength(r.body) <= LIMIT);
        assert.deepEqual(
          accepted.flatMap((r) => (r.json.events as WireEvent[]).map((e) => e.pathname)),
          Array.from({ length: 300 }, (_, i) => `/${i}`),
          'every event once, in order',
        );
        assert.deepEqual(t.drops, []);
        assert.deepEqual(t.errors, []);
        assert.equal(t.stats().delivered, 300);
        // A second round goes out in requests that fit at once.
        const before = server.requests.length;
        for (let i = 0; i < 300; i++) void t.event('e', { pathname: `/again/${i}`, page_title: 't'.repeat(100) });
        await t.flush();
        const later = server.requests.slice(before);
        assert.ok(later.every((r) => Buffer.byteLength(r.body) <= LIMIT), 'no 413 after the limits were learnt');
        assert.equal(t.stats().delivered, 600);
        await t.shutdown();
      },
    );
  });

  test('413 for a single event: dropped as failed, with the error', async () => {
    await withServer(
      (_req, res) => reply(res, 413, { success: false, error: 'Payload too large' }),
      async (server) => {
        const t = batchTracker(server);
        await t.pageview();
        await t.flush();
        assert.equal(server.requests.length, 1);
        assert.deepEqual(t.drops.map(([, r]) => r), ['failed']);
        assert.equal(t.errors[0]!.status, 413);
        await t.shutdown();
      },
    );
  });

  test('400 "events must hold at most N events": batches of N from then on', async () => {
    await withServer(
      (req, res) => {
        const n = req.json.events.length;
        if (n > 7) {
          return reply(res, 400, {
            success: false,
            error: 'Invalid payload',
            details: { fieldErrors: { events: ['events must hold at most 7 events'] }, formErrors: [] },
          });
        }
        reply(res, 200, acceptAll(req));
      },
      async (server) => {
        const t = batchTracker(server);
        for (let i = 0; i < 30; i++) void t.pageview({ pathname: `/${i}` });
        await t.flush();
        const ok = server.requests.filter((r) => r.json.events.length <= 7);
        assert.deepEqual(ok.map((r) => r.json.events.length), [7, 7, 7, 7, 2]);
        assert.equal(server.requests.length, 6, 'one refused request, then none');
        assert.equal(t.stats().delivered, 30);
        assert.deepEqual(t.drops, []);
        await t.shutdown();
      },
    );
  });
});

describe('Retry-After, 408 and 429', () => {
  test('batch: a Retry-After longer than retryMaxDelayMs pauses sending instead of dropping', async () => {
    await withServer(
      (req, res, i) =>
        i === 0 ? reply(res, 503, { success: false, error: 'Service unavailable' }, { 'retry-after': '1' }) : reply(res, 200, acceptAll(req)),
      async (server) => {
        const t = batchTracker(server, { retryMaxDelayMs: 50 });
        for (let i = 0; i < 3; i++) await t.pageview();
        await t.flush();
        assert.equal(server.requests.length, 2);
        const waited = server.requests[1]!.at - server.requests[0]!.at;
        assert.ok(waited >= 950, `waited ${waited} ms; Retry-After said 1 s`);
        assert.deepEqual(t.drops, []);
        assert.equal(t.stats().delivered, 3);
        await t.shutdown();
      },
    );
  });

  test('single: a Retry-After longer than retryMaxDelayMs is waited for, then the event is sent', async () => {
    await withServer(
      (_req, res, i) =>
        i === 0 ? reply(res, 429, { success: false, error: 'Rate limit exceeded.' }, { 'retry-after': '1' }) : reply(res, 200, { success: true }),
      async (server) => {
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, retryMaxDelayMs: 10, throwOnError: true });
        await t.pageview();
        assert.equal(server.requests.length, 2);
        assert.ok(server.requests[1]!.at - server.requests[0]!.at >= 950);
      },
    );
  });

  test('Retry-After as an HTTP date is honoured', async () => {
    // HTTP dates have whole seconds: two seconds ahead is at least one second of wait.
    const when = (): string => new Date(Date.now() + 2000).toUTCString();
    await withServer(
      (_req, res, i) => (i === 0 ? reply(res, 503, { success: false }, { 'retry-after': when() }) : reply(res, 200, { success: true })),
      async (server) => {
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, throwOnError: true, retryBaseDelayMs: 1 });
        await t.pageview();
        assert.equal(server.requests.length, 2);
        assert.ok(server.requests[1]!.at - server.requests[0]!.at >= 950);
      },
    );
  });

  test('a pause holds every request of the tracker, not only the one that got it', async () => {
    await withServer(
      (_req, res, i) => (i === 0 ? reply(res, 429, { success: false }, { 'retry-after': '1' }) : reply(res, 200, { success: true })),
      async (server) => {
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, throwOnError: true, retryBaseDelayMs: 1 });
        const first = t.pageview({ pathname: '/first' });
        await new Promise((r) => setTimeout(r, 100));
        const started = Date.now();
        await t.pageview({ pathname: '/second' });
        assert.ok(Date.now() - started >= 800, 'the second call waited for the pause');
        await first;
        assert.equal(server.requests.length, 3);
      },
    );
  });

  test('the backoff between retries is capped by retryMaxDelayMs', async () => {
    await withServer(
      (_req, res, i) => (i < 4 ? reply(res, 500, { success: false }) : reply(res, 200, { success: true })),
      async (server) => {
        // base 10 s would wait up to 10, 20, 40 s; the cap keeps every wait under 100 ms.
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, throwOnError: true, maxRetries: 4, retryBaseDelayMs: 10_000, retryMaxDelayMs: 100 });
        const started = Date.now();
        await t.pageview();
        assert.equal(server.requests.length, 5);
        assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
        for (let i = 1; i < 5; i++) assert.ok(server.requests[i]!.at - server.requests[i - 1]!.at < 400);
      },
    );
  });

  test('408 (a body the server did not get in time) is retried, single and batch', async () => {
    const answer: Handler = (req, res, i) =>
      i === 0 ? reply(res, 408, { success: false, error: 'Request timeout' }) : reply(res, 200, req.path.endsWith('/batch') ? acceptAll(req) : { success: true });
    await withServer(answer, async (server) => {
      await new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, throwOnError: true, retryBaseDelayMs: 1 }).pageview();
      assert.equal(server.requests.length, 2);
    });
    await withServer(answer, async (server) => {
      const t = batchTracker(server);
      await t.pageview();
      await t.flush();
      assert.equal(server.requests.length, 2);
      assert.equal(t.stats().delivered, 1);
      assert.deepEqual(t.drops, []);
      await t.shutdown();
    });
  });

  test('batch: 429 does not use up retries; the batch waits until the server takes it', async () => {
    await withServer(
      (req, res, i) => (i < 5 ? reply(res, 429, { success: false, error: 'Rate limit exceeded.' }, { 'retry-after': '0' }) : reply(res, 200, acceptAll(req))),
      async (server) => {
        const t = batchTracker(server, { maxRetries: 1 });
        await t.pageview();
        await t.flush();
        assert.equal(server.requests.length, 6);
        assert.equal(t.stats().delivered, 1);
        assert.deepEqual(t.drops, []);
        await t.shutdown();
      },
    );
  });

  test('single: 429 counts as an attempt (a caller awaits the answer)', async () => {
    await withServer(
      (_req, res) => reply(res, 429, { success: false, error: 'Rate limit exceeded.' }, { 'retry-after': '0' }),
      async (server) => {
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, throwOnError: true, retryBaseDelayMs: 1, maxRetries: 2 });
        await assert.rejects(t.pageview(), { name: 'TrackerError', status: 429, attempts: 3 });
        assert.equal(server.requests.length, 3);
      },
    );
  });
});
