import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Tracker, TrackerError, type DropReason, type TrackerOptions, type WireEvent, type WireIdentify } from 'rivulet-node';
import { API_KEY, acceptAll, reply, sleep, startServer, waitFor, type Handler, type TestServer } from '../helpers/server.js';

const packageRoot = fileURLToPath(new URL('../../../', import.meta.url));

async function withServer(handler: Handler, fn: (s: TestServer) => Promise<void>): Promise<void> {
  const server = await startServer(handler);
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

const accept: Handler = (req, res) => reply(res, 200, acceptAll(req));

/** The pathname of a dropped event (identify calls have none). */
const pathOf = (e: WireEvent | WireIdentify): string | undefined => (e.type === 'identify' ? undefined : e.pathname);

interface Recorder {
  drops: [WireEvent | WireIdentify, DropReason][];
  errors: TrackerError[];
}

function batchTracker(server: TestServer, batch: TrackerOptions['batch'], extra: Partial<TrackerOptions> = {}): Tracker & Recorder {
  const rec: Recorder = { drops: [], errors: [] };
  const t = new Tracker({
    analyticsHost: server.host,
    siteId: '1',
    apiKey: API_KEY,
    retryBaseDelayMs: 1,
    batch,
    onDrop: (ev, reason) => rec.drops.push([ev, reason]),
    onError: (e) => rec.errors.push(e),
    ...extra,
  });
  return Object.assign(t, rec);
}

const eventsOf = (server: TestServer): WireEvent[] => server.requests.flatMap((r) => r.json.events as WireEvent[]);

describe('batch mode', () => {
  test('calls resolve at once without a request; flush() sends one batch in the documented format', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushInterval: 60_000 });
      await t.pageview({ pathname: '/a' });
      await t.event('signup', { user_id: 'u1' }, { plan: 'pro' });
      assert.equal(server.requests.length, 0);
      assert.equal(t.stats().queued, 2);
      await t.flush();
      assert.equal(server.requests.length, 1);
      const req = server.requests[0]!;
      assert.equal(req.path, '/api/track/batch');
      assert.equal(req.json.api_key, API_KEY);
      assert.equal(req.json.site_id, '1');
      assert.equal(req.json.events.length, 2);
      const [pv, ev] = req.json.events;
      assert.equal(pv.type, 'pageview');
      assert.equal(pv.pathname, '/a');
      assert.equal(ev.type, 'custom_event');
      assert.equal(ev.event_name, 'signup');
      assert.equal(ev.properties, '{"plan":"pro"}');
      for (const e of req.json.events) {
        assert.equal(typeof e.event_id, 'string');
        assert.equal(typeof e.timestamp, 'string');
        assert.equal('api_key' in e, false);
        assert.equal('site_id' in e, false);
      }
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 2, failed: 0 });
      await t.shutdown();
    });
  });

  test('the timestamp is the time of the call, not of the flush', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushInterval: 60_000 });
      const before = Date.now();
      await t.pageview();
      const after = Date.now();
      await sleep(100);
      await t.flush();
      const ts = Date.parse(server.requests[0]!.json.events[0].timestamp);
      assert.ok(ts >= before && ts <= after, `timestamp ${ts} within [${before}, ${after}]`);
      assert.match(server.requests[0]!.json.events[0].timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      await t.shutdown();
    });
  });

  test('a batch goes out when flushAt events are queued', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushAt: 5, flushInterval: 60_000 });
      for (let i = 0; i < 4; i++) await t.pageview();
      await sleep(100);
      assert.equal(server.requests.length, 0, 'nothing sent below flushAt');
      await t.pageview();
      await waitFor(() => server.requests.length > 0);
      assert.equal(server.requests.length, 1);
      assert.equal(server.requests[0]!.json.events.length, 5);
      await t.shutdown();
    });
  });

  test('a batch goes out flushInterval after an event was queued', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushInterval: 50 });
      await t.pageview();
      await waitFor(() => server.requests.length > 0);
      assert.equal(server.requests.length, 1);
      await t.shutdown();
    });
  });

  test('batches split at 500 events', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushAt: 10_000, maxQueueSize: 10_000, flushInterval: 60_000 });
      for (let i = 0; i < 1201; i++) void t.event('e', { pathname: `/${i}` });
      await t.flush();
      assert.deepEqual(server.requests.map((r) => r.json.events.length), [500, 500, 201]);
      const events = eventsOf(server);
      assert.deepEqual(events.map((e) => e.pathname), Array.from({ length: 1201 }, (_, i) => `/${i}`), 'in order, none lost');
      assert.equal(t.stats().delivered, 1201);
      await t.shutdown();
    });
  });

  test('batches split at 1 MiB', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushAt: 10_000, flushInterval: 60_000 });
      // ~10 KB per event: 300 of them are ~3 MB, so at most ~100 fit in one request.
      const big = { pathname: '/'.padEnd(2048, 'p'), querystring: '?'.padEnd(2048, 'q'), referrer: 'r'.repeat(2048), page_title: 't'.repeat(512) };
      for (let i = 0; i < 300; i++) void t.event('e', big, { blob: 'b'.repeat(2000) });
      await t.flush();
      assert.ok(server.requests.length >= 3);
      for (const r of server.requests) assert.ok(Buffer.byteLength(r.body) <= 1024 * 1024, `body of ${Buffer.byteLength(r.body)} bytes`);
      assert.equal(eventsOf(server).length, 300);
      await t.shutdown();
    });
  });

  test('a batch body made ahead goes out only while its sent_at is recent', async () => {
    await withServer(
      async (req, res, i) => {
        // The first answer comes late: the next batch, made while it was in flight, is older than 1 s by then.
        if (i === 0) await sleep(1500);
        reply(res, 200, acceptAll(req));
      },
      async (server) => {
        const t = batchTracker(server, { flushAt: 500, flushInterval: 60_000 });
        for (let i = 0; i < 1000; i++) void t.pageview({ pathname: `/${i}` });
        await t.flush();
        assert.equal(server.requests.length, 2);
        const [first, second] = server.requests;
        assert.equal(second!.json.events.length, 500);
        const sent = Date.parse(second!.json.sent_at);
        assert.ok(sent >= first!.at + 1000 && sent <= second!.at, `sent_at ${second!.json.sent_at} is the time the second request went out`);
        await t.shutdown();
      },
    );
  });

  test('429/5xx retry the whole batch with the same event_ids', async () => {
    await withServer(
      (req, res, i) => {
        if (i === 0) return reply(res, 503, { success: false, error: 'Service unavailable' }, { 'retry-after': '0' });
        if (i === 1) return reply(res, 429, { success: false, error: 'Rate limit exceeded.' }, { 'retry-after': '0' });
        return reply(res, 200, acceptAll(req));
      },
      async (server) => {
        const t = batchTracker(server, { flushInterval: 60_000 });
        for (let i = 0; i < 3; i++) await t.pageview();
        await t.flush();
        assert.equal(server.requests.length, 3);
        assert.equal(new Set(server.requests.map((r) => JSON.stringify(r.json.events))).size, 1, 'identical events on every attempt (ids and timestamps)');
        // Each attempt's envelope says when it was sent (the server corrects the clock by it).
        const sent = server.requests.map((r) => Date.parse(r.json.sent_at));
        for (const [i, r] of server.requests.entries()) {
          assert.match(r.json.sent_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
          assert.ok(sent[i]! <= r.at && sent[i]! >= r.at - 1000, `attempt ${i}: sent_at ${r.json.sent_at}, received ${r.at}`);
          if (i > 0) assert.ok(sent[i]! >= sent[i - 1]!, 'each attempt has its own, later sent_at');
        }
        assert.deepEqual(Object.keys(server.requests[0]!.json), ['api_key', 'site_id', 'sent_at', 'events']);
        assert.deepEqual(t.drops, []);
        assert.deepEqual(t.errors, []);
        await t.shutdown();
      },
    );
  });

  test('events the server reports invalid go to onError and onDrop("invalid"), and are not retried', async () => {
    const details = { fieldErrors: { ip_address: ['ip_address must be an IPv4 or IPv6 address'] }, formErrors: [] };
    await withServer(
      (req, res) => {
        const events = req.json.events as WireEvent[];
        reply(res, 200, {
          success: false,
          accepted: 2,
          rejected: 1,
          failed: 0,
          results: events.map((e, i) =>
            i === 1 ? { status: 'invalid', error: 'Invalid payload', details } : { status: 'accepted', event_id: e.event_id },
          ),
        });
      },
      async (server) => {
        const t = batchTracker(server, { flushInterval: 60_000 });
        await t.pageview({ pathname: '/0' });
        await t.event('bad', { pathname: '/1' });
        await t.pageview({ pathname: '/2' });
        await t.flush();
        assert.equal(server.requests.length, 1);
        assert.equal(t.drops.length, 1);
        assert.equal(t.drops[0]![1], 'invalid');
        assert.equal(pathOf(t.drops[0]![0]), '/1');
        assert.equal(t.errors.length, 1);
        const err = t.errors[0]!;
        assert.equal(err.code, 'invalid_event');
        assert.equal(err.serverMessage, 'Invalid payload');
        assert.deepEqual(err.details, details);
        assert.deepEqual(err.eventIds, [t.drops[0]![0].event_id]);
        assert.match(err.message, /rejected custom event "bad" .*: Invalid payload - ip_address: ip_address must be/);
        assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 2, failed: 1 });
        await t.shutdown();
      },
    );
  });

  test('401/404/400 fail the whole batch: one onError, onDrop("failed") per event, no retry', async () => {
    for (const status of [400, 401, 404]) {
      await withServer(
        (_req, res) => reply(res, status, { success: false, error: `status ${status}` }),
        async (server) => {
          const t = batchTracker(server, { flushInterval: 60_000 });
          for (let i = 0; i < 4; i++) await t.pageview();
          await t.flush();
          assert.equal(server.requests.length, 1, `${status}: sent once`);
          assert.equal(t.errors.length, 1);
          assert.equal(t.errors[0]!.status, status);
          assert.equal(t.errors[0]!.eventIds.length, 4);
          assert.deepEqual(t.drops.map(([, reason]) => reason), ['failed', 'failed', 'failed', 'failed']);
          await t.shutdown();
        },
      );
    }
  });

  test('a full queue calls onDrop("queue_full") for each event and onError once', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushAt: 1000, maxQueueSize: 10, flushInterval: 60_000 });
      for (let i = 0; i < 15; i++) await t.pageview({ pathname: `/${i}` });
      assert.equal(t.drops.length, 5);
      assert.ok(t.drops.every(([, reason]) => reason === 'queue_full'));
      assert.deepEqual(t.drops.map(([e]) => pathOf(e)), ['/10', '/11', '/12', '/13', '/14']);
      assert.equal(t.errors.length, 1);
      assert.equal(t.errors[0]!.code, 'queue_full');
      await t.flush();
      assert.equal(eventsOf(server).length, 10);
      await t.shutdown();
    });
  });

  test('with throwOnError a full queue rejects the call (and still calls onDrop)', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushAt: 1000, maxQueueSize: 1, flushInterval: 60_000 }, { throwOnError: true });
      await t.pageview();
      await assert.rejects(t.pageview(), { name: 'TrackerError', code: 'queue_full' });
      assert.equal(t.drops.length, 1);
      await t.shutdown();
    });
  });

  test('invalid events are rejected at the call, never queued', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushInterval: 60_000 }, { throwOnError: true });
      await assert.rejects(t.event('e', {}, { big: 'x'.repeat(3000) }), { code: 'invalid_event' });
      assert.equal(t.stats().queued, 0);
      await t.shutdown();
      assert.equal(server.requests.length, 0);
    });
  });

  test('shutdown() drains the queue, then refuses new events', async () => {
    await withServer(accept, async (server) => {
      const t = batchTracker(server, { flushAt: 50, flushInterval: 60_000 });
      for (let i = 0; i < 120; i++) void t.pageview();
      await t.shutdown();
      assert.equal(eventsOf(server).length, 120);
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 120, failed: 0 });
      await t.pageview();
      assert.equal(t.drops.length, 1);
      assert.equal(t.drops[0]![1], 'shutdown');
      assert.equal(t.errors.at(-1)!.code, 'shutdown');
      assert.equal(t.shutdown(), t.shutdown(), 'shutdown is idempotent');
    });
  });

  test('shutdown(timeoutMs) gives up on a server that does not answer: events dropped with "shutdown"', async () => {
    await withServer(
      () => {}, // never answers
      async (server) => {
        const t = batchTracker(server, { flushInterval: 60_000 }, { timeoutMs: 60_000 });
        for (let i = 0; i < 3; i++) await t.pageview();
        const started = Date.now();
        await t.shutdown(200);
        assert.ok(Date.now() - started < 2000);
        assert.deepEqual(t.drops.map(([, r]) => r), ['shutdown', 'shutdown', 'shutdown']);
        assert.equal(t.errors[0]!.code, 'shutdown');
      },
    );
  });

  test('failed retries drop the batch with "failed" once maxRetries is used up', async () => {
    await withServer(
      (_req, res) => reply(res, 503, { success: false, error: 'Service unavailable' }, { 'retry-after': '0' }),
      async (server) => {
        const t = batchTracker(server, { flushInterval: 60_000 }, { maxRetries: 2 });
        await t.pageview();
        await t.flush();
        assert.equal(server.requests.length, 3);
        assert.deepEqual(t.drops.map(([, r]) => r), ['failed']);
        assert.equal(t.errors[0]!.status, 503);
        await t.shutdown();
      },
    );
  });

  test('the flush timer does not keep the process alive, and queued events are sent before a natural exit', async () => {
    await withServer(accept, async (server) => {
      const script = `
        import { Tracker } from 'rivulet-node';
        const t = new Tracker({ analyticsHost: ${JSON.stringify(server.host)}, siteId: 1, apiKey: ${JSON.stringify(API_KEY)},
          batch: { flushInterval: 3600000 } });
        for (let i = 0; i < 3; i++) t.pageview({ pathname: '/exit' });
      `;
      const started = Date.now();
      const code = await new Promise<number | null>((resolve, reject) => {
        const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: packageRoot, stdio: 'inherit' });
        const killer = setTimeout(() => child.kill(), 20_000);
        child.on('error', reject);
        child.on('exit', (c) => {
          clearTimeout(killer);
          resolve(c);
        });
      });
      assert.equal(code, 0);
      assert.ok(Date.now() - started < 15_000, 'exited without waiting for the hour-long flush interval');
      assert.equal(eventsOf(server).length, 3, 'beforeExit sent the queued events');
    });
  });
});
