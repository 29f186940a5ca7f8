// flush(), shutdown(), stats(), disabled trackers, and serverless use.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Tracker, TrackerError, type DropReason, type TrackerOptions, type WireEvent, type WireIdentify } from 'rivulet-node';
import { API_KEY, acceptAll, captureConsole, reply, sleep, startServer, type Handler, type TestServer } from '../helpers/server.js';

const packageRoot = fileURLToPath(new URL('../../../', import.meta.url));

async function withServer(handler: Handler, fn: (s: TestServer) => Promise<void>): Promise<void> {
  const server = await startServer(handler);
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

const accept: Handler = (req, res) => reply(res, 200, req.path.endsWith('/batch') ? acceptAll(req) : { success: true });

/** Answers after `ms`. */
const slow =
  (ms: number): Handler =>
  (req, res) =>
    void setTimeout(() => accept(req, res, 0), ms);

function recorder(): { drops: [WireEvent | WireIdentify, DropReason][]; errors: TrackerError[]; options: Partial<TrackerOptions> } {
  const drops: [WireEvent | WireIdentify, DropReason][] = [];
  const errors: TrackerError[] = [];
  return { drops, errors, options: { onDrop: (e, r) => drops.push([e, r]), onError: (e) => errors.push(e) } };
}

describe('stats().failed', () => {
  test('counts queue-full drops and events tracked after shutdown', async () => {
    await withServer(accept, async (server) => {
      const rec = recorder();
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: { flushAt: 1000, maxQueueSize: 3, flushInterval: 60_000 }, ...rec.options });
      for (let i = 0; i < 5; i++) await t.pageview();
      assert.equal(t.stats().failed, 2, 'two queue-full drops');
      await t.shutdown();
      await t.pageview();
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 3, failed: 3 });
      assert.equal(rec.drops.length, 3, 'as many drops as failed events');
    });
  });

  test('single mode: a call after shutdown counts as failed', async () => {
    await withServer(accept, async (server) => {
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, onError: () => {} });
      await t.pageview();
      await t.shutdown();
      await t.pageview();
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 1, failed: 1 });
    });
  });
});

describe('shutdown(timeoutMs)', () => {
  for (const timeout of [Infinity, Number.NaN, -1, 2 ** 40]) {
    test(`shutdown(${timeout}) waits for the event in flight instead of cutting it off`, async () => {
      await withServer(slow(300), async (server) => {
        const rec = recorder();
        const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true, ...rec.options });
        await t.pageview();
        await t.shutdown(timeout);
        assert.deepEqual(rec.drops, []);
        assert.equal(t.stats().delivered, 1);
        const invalid = rec.errors.filter((e) => e.code === 'invalid_options');
        assert.equal(invalid.length, Number.isNaN(timeout) || timeout < 0 ? 1 : 0, 'a bad timeout is reported, not used');
      });
    });
  }

  test('single mode: shutdown() waits for requests in flight; shutdown(0) cuts them off', async () => {
    await withServer(slow(200), async (server) => {
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, onError: () => {} });
      const call = t.pageview();
      await t.shutdown();
      assert.equal(t.stats().delivered, 1);
      await call;
    });
    await withServer(slow(2000), async (server) => {
      const errors: TrackerError[] = [];
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, onError: (e) => errors.push(e) });
      const call = t.pageview();
      await sleep(50);
      const started = Date.now();
      await t.shutdown(0);
      await call;
      assert.ok(Date.now() - started < 1000);
      assert.deepEqual(errors.map((e) => e.code), ['shutdown']);
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 0, failed: 1 });
    });
  });
});

describe('flush(timeoutMs)', () => {
  test('single mode: flush() waits for calls that were not awaited', async () => {
    await withServer(slow(200), async (server) => {
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY });
      void t.pageview();
      void t.event('x');
      assert.equal(t.stats().inFlight, 2);
      assert.equal(await t.flush(), true);
      assert.deepEqual(t.stats(), { queued: 0, inFlight: 0, delivered: 2, failed: 0 });
    });
  });

  test('resolves false when the time is up, and the events keep going', async () => {
    await withServer(slow(500), async (server) => {
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true });
      await t.pageview();
      const started = Date.now();
      assert.equal(await t.flush(100), false);
      assert.ok(Date.now() - started < 400);
      assert.equal(await t.flush(5000), true);
      assert.equal(t.stats().delivered, 1);
      await t.shutdown();
    });
  });

  test('resolves true at once when nothing is pending', async () => {
    const t = new Tracker({ analyticsHost: 'http://127.0.0.1:9/api', siteId: 1, apiKey: API_KEY, batch: true });
    assert.equal(await t.flush(0), true);
    await t.shutdown();
  });
});

describe('queue full and callbacks', () => {
  test('a second queue-full episode after the queue drained is reported again', async () => {
    await withServer(accept, async (server) => {
      const rec = recorder();
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: { flushAt: 1000, maxQueueSize: 4, flushInterval: 60_000 }, ...rec.options });
      for (let i = 0; i < 6; i++) await t.pageview();
      assert.equal(rec.errors.length, 1);
      await t.flush();
      await t.pageview(); // the queue is below half: the episode is over
      for (let i = 0; i < 5; i++) await t.pageview();
      assert.deepEqual(rec.errors.map((e) => e.code), ['queue_full', 'queue_full']);
      assert.equal(rec.drops.filter(([, r]) => r === 'queue_full').length, 4);
      await t.shutdown();
    });
  });

  test('an onDrop that throws breaks neither delivery nor the other drops', async () => {
    await withServer(accept, async (server) => {
      let calls = 0;
      const t = new Tracker({
        analyticsHost: server.host,
        siteId: 1,
        apiKey: API_KEY,
        batch: { flushAt: 1000, maxQueueSize: 2, flushInterval: 60_000 },
        onError: () => {},
        onDrop: () => {
          calls++;
          throw new Error('boom');
        },
      });
      const lines = await captureConsole('error', async () => {
        for (let i = 0; i < 4; i++) await t.pageview();
      });
      assert.equal(calls, 2);
      assert.equal(lines.filter((l) => /onDrop callback threw/.test(l)).length, 2);
      await t.flush();
      assert.equal(t.stats().delivered, 2);
      await t.shutdown();
    });
  });
});

describe('disabled', () => {
  test('sends nothing, needs no destination, and still reports invalid events', async () => {
    await withServer(accept, async (server) => {
      const errors: TrackerError[] = [];
      const quiet = new Tracker({ disabled: true, analyticsHost: undefined, siteId: undefined, apiKey: undefined, onError: (e) => errors.push(e) });
      await quiet.pageview({ pathname: '/' });
      await quiet.event('signup', {}, { plan: 'pro' });
      await quiet.pageview({ page_title: 'x'.repeat(600) });
      assert.deepEqual(errors.map((e) => e.code), ['invalid_event']);
      assert.equal(await quiet.flush(), true);
      await quiet.shutdown();

      const configured = new Tracker({ disabled: true, analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true });
      await configured.pageview();
      await configured.flush();
      await configured.shutdown();
      assert.equal(server.requests.length, 0);
      assert.deepEqual(configured.stats(), { queued: 0, inFlight: 0, delivered: 0, failed: 0 });
    });
  });

  test('given options are still checked', () => {
    assert.throws(() => new Tracker({ disabled: true, analyticsHost: 'x', siteId: 1, apiKey: API_KEY }), /"analyticsHost"/);
    assert.throws(() => new Tracker({ disabled: 'yes' as never, analyticsHost: 'http://x/api', siteId: 1, apiKey: API_KEY }), /"disabled"/);
  });
});

/** Runs `script` as an ES module in a child Node process with the package importable. */
function runChild(script: string): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: packageRoot, stdio: 'inherit' });
    const killer = setTimeout(() => child.kill(), 20_000);
    child.on('error', reject);
    child.on('exit', (c) => {
      clearTimeout(killer);
      resolve(c);
    });
  });
}

describe('serverless: the function returns, then the runtime freezes or ends the process', () => {
  // The handler returns and the "platform" ends the process at once (process.exit), as a
  // frozen Lambda never runs the event loop again: only what was delivered before counts.
  const handlerScript = (host: string, body: string): string => `
    import { Tracker } from 'rivulet-node';
    const tracker = new Tracker({ analyticsHost: ${JSON.stringify(host)}, siteId: 1, apiKey: ${JSON.stringify(API_KEY)}, batch: true });
    const pending = [];
    const waitUntil = (p) => pending.push(p); // what Vercel's waitUntil / Cloudflare's ctx.waitUntil do
    async function handler(request) {
      ${body}
      return { statusCode: 200 };
    }
    await handler({ path: '/checkout' });
    await Promise.all(pending); // the platform waits for waitUntil promises, then freezes
    process.exit(0);
  `;

  test('await tracker.flush() before returning: every event arrives', async () => {
    await withServer(slow(100), async (server) => {
      const code = await runChild(
        handlerScript(server.host, `for (let i = 0; i < 3; i++) tracker.pageview({ pathname: request.path }); await tracker.flush();`),
      );
      assert.equal(code, 0);
      assert.equal(server.requests.flatMap((r) => r.json.events).length, 3);
    });
  });

  test('waitUntil(tracker.flush()): every event arrives', async () => {
    await withServer(slow(100), async (server) => {
      const code = await runChild(handlerScript(server.host, `tracker.event('purchase', { pathname: request.path }); waitUntil(tracker.flush());`));
      assert.equal(code, 0);
      assert.equal(server.requests.flatMap((r) => r.json.events).length, 1);
    });
  });

  test('without either, the events are lost (why the pattern is needed)', async () => {
    await withServer(slow(100), async (server) => {
      const code = await runChild(handlerScript(server.host, `tracker.pageview({ pathname: request.path });`));
      assert.equal(code, 0);
      await sleep(300);
      assert.equal(server.requests.length, 0);
    });
  });
});
