import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';
import { Tracker, TrackerError, type TrackerOptions } from 'rivulet-node';
import { API_KEY, acceptAll, captureConsole, reply, startServer, type Handler, type TestServer } from '../helpers/server.js';

const RATE_LIMITED = { success: false, error: 'Rate limit exceeded. Maximum 20 requests per second per API key.' };
const UNAVAILABLE = { success: false, error: 'Service unavailable' };

/** Runs fn against a fresh server and always closes it. */
async function withServer(handler: Handler, fn: (s: TestServer) => Promise<void>): Promise<void> {
  const server = await startServer(handler);
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

function tracker(server: TestServer, extra: Partial<TrackerOptions> = {}): Tracker {
  return new Tracker({
    analyticsHost: server.host,
    siteId: '1',
    apiKey: API_KEY,
    retryBaseDelayMs: 1,
    throwOnError: true,
    ...extra,
  });
}

/** Answers with the given statuses in turn, then 200. */
function sequence(...statuses: number[]): Handler {
  return (req, res, i) => {
    const status = statuses[i];
    if (status === undefined) return reply(res, 200, req.path.endsWith('/batch') ? acceptAll(req) : { success: true });
    if (status === 429) return reply(res, 429, RATE_LIMITED, { 'retry-after': '0' });
    return reply(res, status, status === 503 ? UNAVAILABLE : { success: false, error: `status ${status}` });
  };
}

describe('timeouts and retries', () => {
  test('a request that gets no answer times out', async () => {
    await withServer(
      () => {}, // never answers
      async (server) => {
        const started = Date.now();
        await assert.rejects(tracker(server, { timeoutMs: 500, maxRetries: 0 }).pageview(), (err: unknown) => {
          assert.ok(err instanceof TrackerError);
          assert.equal(err.code, 'timeout');
          assert.equal(err.retryable, true);
          assert.equal(err.status, undefined);
          assert.match(err.message, /timed out after 500 ms/);
          return true;
        });
        assert.ok(Date.now() - started < 3000);
        assert.equal(server.requests.length, 1);
      },
    );
  });

  test('timeouts are retried', async () => {
    await withServer(
      (_req, res, i) => (i === 0 ? undefined : reply(res, 200, { success: true })),
      async (server) => {
        await tracker(server, { timeoutMs: 500 }).pageview();
        assert.equal(server.requests.length, 2);
      },
    );
  });

  test('503 is retried and succeeds; the event_id and body are the same on every attempt, but for sent_at', async () => {
    await withServer(sequence(503, 503, 503), async (server) => {
      await tracker(server, { maxRetries: 3 }).event('signup', { user_id: 'u1' }, { plan: 'pro' });
      assert.equal(server.requests.length, 4);
      const ids = new Set(server.requests.map((r) => r.json.event_id));
      assert.equal(ids.size, 1, 'one event_id across retries');
      const withoutSentAt = server.requests.map((r) => {
        const { sent_at: _, ...rest } = r.json;
        return JSON.stringify(rest);
      });
      assert.equal(new Set(withoutSentAt).size, 1, 'identical bodies, timestamp included');
      // sent_at is each attempt's own time: the server corrects the client's clock by it.
      const sent = server.requests.map((r) => Date.parse(r.json.sent_at));
      for (const [i, r] of server.requests.entries()) {
        assert.ok(sent[i]! <= r.at && sent[i]! >= r.at - 1000, `attempt ${i}: sent_at ${r.json.sent_at}, received ${r.at}`);
        if (i > 0) assert.ok(sent[i]! >= sent[i - 1]!, `attempt ${i}: a later sent_at`);
      }
    });
  });

  test('5xx gives up after maxRetries with a retryable TrackerError', async () => {
    await withServer(sequence(500, 502, 503, 504, 503), async (server) => {
      await assert.rejects(tracker(server, { maxRetries: 2 }).pageview(), (err: unknown) => {
        assert.ok(err instanceof TrackerError);
        assert.equal(err.code, 'http');
        assert.equal(err.status, 503);
        assert.equal(err.serverMessage, 'Service unavailable');
        assert.equal(err.retryable, true);
        assert.equal(err.attempts, 3);
        assert.match(err.message, /after 3 attempts/);
        return true;
      });
      assert.equal(server.requests.length, 3);
    });
  });

  test('429 waits for Retry-After seconds before retrying', async () => {
    await withServer(
      (_req, res, i) =>
        i === 0 ? reply(res, 429, RATE_LIMITED, { 'retry-after': '1' }) : reply(res, 200, { success: true }),
      async (server) => {
        await tracker(server).pageview();
        assert.equal(server.requests.length, 2);
        const waited = server.requests[1]!.at - server.requests[0]!.at;
        assert.ok(waited >= 950, `waited ${waited} ms, Retry-After said 1 s`);
      },
    );
  });

  test('400 is not retried; the error carries status, serverMessage and details', async () => {
    const details = { fieldErrors: { properties: ['properties must be a string of valid JSON'] }, formErrors: [] };
    await withServer(
      (_req, res) => reply(res, 400, { success: false, error: 'Invalid payload', details }),
      async (server) => {
        await assert.rejects(tracker(server).event('x'), (err: unknown) => {
          assert.ok(err instanceof TrackerError);
          assert.equal(err.code, 'http');
          assert.equal(err.status, 400);
          assert.equal(err.serverMessage, 'Invalid payload');
          assert.deepEqual(err.details, details);
          assert.equal(err.retryable, false);
          assert.equal(err.attempts, 1);
          assert.match(err.message, /400: Invalid payload - properties: properties must be a string of valid JSON/);
          return true;
        });
        assert.equal(server.requests.length, 1);
      },
    );
  });

  test('401, 404 and 413 are not retried', async () => {
    for (const [status, error] of [
      [401, 'Invalid API key'],
      [404, 'Site not found'],
      [413, 'Payload too large'],
    ] as const) {
      await withServer(
        (_req, res) => reply(res, status, { success: false, error }),
        async (server) => {
          await assert.rejects(tracker(server).pageview(), { name: 'TrackerError', status, serverMessage: error, retryable: false });
          assert.equal(server.requests.length, 1, `${status} sent once`);
        },
      );
    }
  });

  test('network errors are retried, then reported', async () => {
    // A port that refuses connections: bind one, then close it.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as { port: number };
    await new Promise<void>((r) => probe.close(() => r()));
    const t = new Tracker({ analyticsHost: `http://127.0.0.1:${port}/api`, siteId: 1, apiKey: API_KEY, retryBaseDelayMs: 1, maxRetries: 2, throwOnError: true });
    await assert.rejects(t.pageview(), (err: unknown) => {
      assert.ok(err instanceof TrackerError);
      assert.equal(err.code, 'network');
      assert.equal(err.retryable, true);
      assert.equal(err.attempts, 3);
      assert.match(err.message, /ECONNREFUSED/);
      return true;
    });
  });
});

describe('error reporting', () => {
  test('by default errors never reject: one console.error line per error', async () => {
    await withServer(sequence(401, 401), async (server) => {
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY });
      const lines = await captureConsole('error', async () => {
        await t.pageview();
        await t.event('x');
      });
      assert.equal(lines.length, 2);
      assert.match(lines[0]!, /answered 401: Invalid API key|answered 401: status 401/);
      assert.ok(!lines[0]!.includes('\n'), 'one short line');
      assert.ok(lines.every((l) => !l.includes(API_KEY)));
    });
  });

  test('onError receives the TrackerError and nothing is printed', async () => {
    await withServer(sequence(400), async (server) => {
      const errors: TrackerError[] = [];
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, onError: (e) => errors.push(e) });
      const lines = await captureConsole('error', () => t.pageview());
      assert.equal(lines.length, 0);
      assert.equal(errors.length, 1);
      assert.ok(errors[0] instanceof TrackerError);
      assert.equal(errors[0]!.status, 400);
      assert.deepEqual(errors[0]!.eventIds, [server.requests[0]!.json.event_id]);
    });
  });

  test('throwOnError rejects instead of calling onError', async () => {
    await withServer(sequence(404), async (server) => {
      let called = 0;
      const t = tracker(server, { onError: () => called++ });
      await assert.rejects(t.pageview(), { name: 'TrackerError', status: 404 });
      assert.equal(called, 0);
    });
  });

  test('a throwing onError does not break the tracker', async () => {
    await withServer(sequence(400), async (server) => {
      let calls = 0;
      const t = new Tracker({
        analyticsHost: server.host,
        siteId: 1,
        apiKey: API_KEY,
        onError: () => {
          calls++;
          throw new Error('boom');
        },
      });
      const lines = await captureConsole('error', async () => {
        await t.pageview();
        await t.pageview({ page_title: 'x'.repeat(600) }); // invalid: onError again
        await t.pageview(); // the server now answers 200
      });
      assert.equal(lines.length, 2);
      assert.ok(lines.every((l) => /onError callback threw/.test(l)));
      assert.equal(calls, 2);
      assert.equal(server.requests.length, 2, 'the tracker kept sending');
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 1, failed: 1 });
    });
  });
});

describe('debug logging', () => {
  test('logs every request and response without the API key', async () => {
    await withServer(
      (req, res, i) => {
        // An answer that echoes the key must be redacted too.
        if (i === 0) return reply(res, 503, { success: false, error: `bad ${API_KEY}` }, { 'retry-after': '0' });
        return reply(res, 200, req.path.endsWith('/batch') ? acceptAll(req) : { success: true });
      },
      async (server) => {
        const lines = await captureConsole('log', async () => {
          const single = tracker(server, { debug: true });
          await single.event('signup', { user_id: 'u1', foo: 1 } as never, { plan: 'pro' });
          const batched = tracker(server, { debug: true, batch: { flushAt: 2 } });
          await batched.pageview();
          await batched.pageview();
          await batched.shutdown();
        });
        const text = lines.join('\n');
        assert.ok(!text.includes(API_KEY), 'API key must never be logged');
        assert.ok(!text.includes(API_KEY.slice(3)), 'not even without its prefix');
        assert.match(text, /-> POST http:\/\/127\.0\.0\.1:\d+\/api\/track \(attempt 1\)/);
        assert.match(text, /<- 503/);
        assert.match(text, /retrying in/);
        assert.match(text, /-> POST .*\/api\/track \(attempt 2\)/);
        assert.match(text, /<- 200/);
        assert.match(text, /-> POST .*\/api\/track\/batch/);
        assert.match(text, /rb_\[REDACTED\]/);
        assert.match(text, /unknown payload fields: foo/);
      },
    );
  });

  test('without debug nothing is logged on success', async () => {
    await withServer(sequence(), async (server) => {
      const lines = await captureConsole('log', () => tracker(server).pageview());
      assert.deepEqual(lines, []);
    });
  });
});
