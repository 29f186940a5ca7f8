// What goes on the wire: caller-supplied event_id and timestamp (checked as ingest checks
// them), the User-Agent, gzip, and a caller's own fetch.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { Tracker, TrackerError, VERSION, type FetchFunction, type WireEvent } from 'rivulet-node';
import { API_KEY, acceptAll, reply, startServer, type Handler, type TestServer } from '../helpers/server.js';

const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };

async function withServer(handler: Handler, fn: (s: TestServer) => Promise<void>): Promise<void> {
  const server = await startServer(handler);
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

const accept: Handler = (req, res) => reply(res, 200, req.path.endsWith('/batch') ? acceptAll(req) : { success: true });

function single(server: TestServer, extra: Record<string, unknown> = {}): Tracker {
  return new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, throwOnError: true, maxRetries: 0, ...extra });
}

async function rejectsInvalid(call: Promise<void>, pattern: RegExp): Promise<void> {
  await assert.rejects(call, (err: unknown) => {
    assert.ok(err instanceof TrackerError);
    assert.equal(err.code, 'invalid_event');
    assert.match(err.message, pattern);
    return true;
  });
}

describe('caller-supplied event_id', () => {
  test('is sent as given, in single and batch mode, and on every retry', async () => {
    const id = '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a';
    await withServer(
      (req, res, i) => (i === 0 ? reply(res, 503, { success: false }, { 'retry-after': '0' }) : accept(req, res, i)),
      async (server) => {
        await single(server, { maxRetries: 1, retryBaseDelayMs: 1 }).pageview({ event_id: id });
        assert.deepEqual(server.requests.map((r) => r.json.event_id), [id, id]);
        const b = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true });
        await b.event('order', { event_id: id.toUpperCase() });
        await b.shutdown();
        assert.equal(server.requests[2]!.json.events[0].event_id, id.toUpperCase());
      },
    );
  });

  test('accepts the forms the server reads, rejects the rest before any request', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      for (const id of [
        '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a',
        '0B0E3A1C-6F0E-4C8E-9A5E-2F6A1D3C4B5A',
        '0b0e3a1c6f0e4c8e9a5e2f6a1d3c4b5a',
        '{0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a}',
        'urn:uuid:0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a',
        '01890a5d-ac96-774b-bcce-b302099a8057', // a UUIDv7: any version is fine
      ]) {
        await t.pageview({ event_id: id });
      }
      assert.equal(server.requests.length, 6);
      for (const bad of [
        '',
        'not-a-uuid',
        '00000000-0000-0000-0000-000000000000',
        '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5', // one digit short
        '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5g',
        '0b0e3a1c_6f0e_4c8e_9a5e_2f6a1d3c4b5a',
        ' 0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a',
      ]) {
        await rejectsInvalid(t.pageview({ event_id: bad }), bad === '' ? /event_id must be a UUID/ : /payload\.event_id must be a UUID/);
      }
      await rejectsInvalid(t.pageview({ event_id: 42 as never }), /payload\.event_id must be a UUID string/);
      assert.equal(server.requests.length, 6, 'no request for an invalid id');
    });
  });
});

describe('caller-supplied timestamp', () => {
  test('a Date, an RFC 3339 string or epoch ms; batch and single', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      const when = new Date('2026-01-02T03:04:05.678Z');
      await t.pageview({ timestamp: when });
      await t.pageview({ timestamp: '2026-01-02T04:04:05.678+01:00' });
      await t.pageview({ timestamp: when.getTime() });
      assert.deepEqual(server.requests.map((r) => r.json.timestamp), [
        '2026-01-02T03:04:05.678Z',
        '2026-01-02T04:04:05.678+01:00',
        '2026-01-02T03:04:05.678Z',
      ]);
      const b = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true });
      await b.event('x', { timestamp: when });
      await b.shutdown();
      assert.equal(server.requests[3]!.json.events[0].timestamp, '2026-01-02T03:04:05.678Z');
    });
  });

  test('what the server accepts passes; what it rejects fails at the call', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      const good = [
        '2026-01-02T03:04:05Z',
        '2026-01-02t03:04:05z', // lowercase t and z
        '2026-01-02 03:04:05Z', // any one-byte separator, as the server's parser allows
        '2026-01-02T03:04:05.123456789Z',
        '2026-01-02T03:04:05.1-05:30',
        '2024-02-29T00:00:00Z', // leap day
        '2016-12-31T23:59:60Z', // leap second at the end of a month (UTC)
        '2017-01-01T00:59:60+01:00', // the same instant with an offset
        '0001-01-01T00:00:00Z',
      ];
      for (const ts of good) await t.pageview({ timestamp: ts });
      assert.equal(server.requests.length, good.length);
      const bad: unknown[] = [
        'yesterday',
        '2026-01-02',
        '2026-01-02T03:04Z', // no seconds
        '2026-01-02T03:04:05', // no offset
        '2026-01-02T03:04:05.Z', // empty fraction
        '2026-13-02T03:04:05Z',
        '2023-02-29T00:00:00Z',
        '2026-01-02T24:00:00Z',
        '2026-01-02T03:04:05+24:00',
        '2026-01-02T03:04:05+01:60',
        '2026-01-15T12:00:60Z', // a leap second not at the end of a month
        '2026-01-02T03:04:05+0100',
        '+2026-01-02T03:04:05Z',
        '2026-01-02é03:04:05Z', // a two-byte separator
        0,
        -5,
        1.5,
        Number.NaN,
        253_402_300_800_000, // year 10000
        new Date(Number.NaN),
        new Date('+010000-01-01T00:00:00Z'),
        true,
        {},
      ];
      for (const ts of bad) await rejectsInvalid(t.pageview({ timestamp: ts as never }), /payload\.timestamp must be/);
      assert.equal(server.requests.length, good.length, 'no request for an invalid timestamp');
    });
  });
});

describe('IP addresses as the server reads them', () => {
  test('valid and invalid forms', async () => {
    await withServer(accept, async (server) => {
      const t = single(server);
      const good = ['81.2.69.142', '0.0.0.0', '255.255.255.255', '::', '::1', '2001:db8::1', '2001:0db8:0000:0000:0000:0000:0000:0001', '::ffff:1.2.3.4', '64:ff9b::192.0.2.33', '1:2:3:4:5:6:1.2.3.4', 'fe80::'];
      for (const ip of good) await t.pageview({ ip_address: ip });
      assert.equal(server.requests.length, good.length);
      const bad = ['', '1.2.3', '1.2.3.4.5', '256.1.1.1', '01.2.3.4', '1.2.3.04', ' 1.2.3.4', '1.2.3.4 ', 'fe80::1%eth0', '1:2:3:4:5:6:7:8:9', '12345::', '1::2::3', '1.2.3.4::', ':::', 'localhost', '[::1]', '1:2:3:4:5:6:7:1.2.3.4'];
      for (const ip of bad) await rejectsInvalid(t.pageview({ ip_address: ip }), /ip_address must be an IPv4 or IPv6 address/);
      assert.equal(server.requests.length, good.length);
    });
  });
});

describe('User-Agent', () => {
  test(`every request says rivulet-node/${pkg.version}`, async () => {
    assert.equal(VERSION, pkg.version, 'src/version.ts matches package.json');
    await withServer(accept, async (server) => {
      await single(server).pageview();
      const b = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true });
      await b.pageview();
      await b.shutdown();
      assert.deepEqual(server.requests.map((r) => r.headers['user-agent']), [`rivulet-node/${pkg.version}`, `rivulet-node/${pkg.version}`]);
    });
  });
});

describe('gzip of batch bodies', () => {
  test('on by default for bodies of 1024 bytes and more; the server gets the same JSON', async () => {
    await withServer(accept, async (server) => {
      const t = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: { flushInterval: 60_000 } });
      await t.pageview({ pathname: '/small' });
      await t.flush();
      for (let i = 0; i < 50; i++) await t.pageview({ pathname: `/big/${i}`, page_title: 'Pricing and plans' });
      await t.flush();
      await t.shutdown();
      const [small, big] = server.requests;
      assert.equal(small!.gzipped, false);
      assert.equal(small!.headers['content-encoding'], undefined);
      assert.equal(big!.gzipped, true);
      assert.equal(big!.headers['content-encoding'], 'gzip');
      assert.ok(big!.wireBytes < Buffer.byteLength(big!.body) / 3, `${big!.wireBytes} bytes on the wire for ${Buffer.byteLength(big!.body)}`);
      assert.equal(big!.json.events.length, 50);
    });
  });

  test('compress: false never compresses; { minBytes } moves the threshold', async () => {
    await withServer(accept, async (server) => {
      const off = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true, compress: false });
      for (let i = 0; i < 50; i++) await off.pageview({ pathname: `/big/${i}` });
      await off.shutdown();
      const low = new Tracker({ analyticsHost: server.host, siteId: 1, apiKey: API_KEY, batch: true, compress: { minBytes: 10 } });
      await low.pageview();
      await low.shutdown();
      assert.deepEqual(server.requests.map((r) => r.gzipped), [false, true]);
    });
  });

  test('single events are never compressed', async () => {
    await withServer(accept, async (server) => {
      await single(server, { compress: { minBytes: 0 } }).pageview({ page_title: 'x'.repeat(500) });
      assert.equal(server.requests[0]!.gzipped, false);
    });
  });
});

describe('custom fetch', () => {
  test('is called instead of the global one, with the request the server would get', async () => {
    const calls: { url: string; headers: Record<string, string>; body: string | Uint8Array }[] = [];
    const fetch: FetchFunction = async (url, init) => {
      calls.push({ url, headers: init.headers, body: init.body });
      const events = JSON.parse(typeof init.body === 'string' ? init.body : gunzipSync(init.body).toString()).events as WireEvent[] | undefined;
      const answer = events ? { results: events.map((e) => ({ status: 'accepted', event_id: e.event_id })) } : { success: true };
      return new Response(JSON.stringify(answer), { status: 200 });
    };
    const t = new Tracker({ analyticsHost: 'https://rivulet.invalid/api', siteId: 1, apiKey: API_KEY, fetch, throwOnError: true });
    await t.pageview();
    const b = new Tracker({ analyticsHost: 'https://rivulet.invalid/api', siteId: 1, apiKey: API_KEY, fetch, batch: true });
    for (let i = 0; i < 30; i++) await b.pageview({ pathname: `/${i}` });
    await b.shutdown();
    assert.deepEqual(calls.map((c) => c.url), ['https://rivulet.invalid/api/track', 'https://rivulet.invalid/api/track/batch']);
    assert.equal(calls[1]!.headers['content-encoding'], 'gzip');
    assert.ok(calls[1]!.body instanceof Uint8Array);
    assert.equal(b.stats().delivered, 30);
  });

  test('a fetch that throws is a network error, retried', async () => {
    let n = 0;
    const fetch: FetchFunction = async () => {
      if (++n < 3) throw new TypeError('fetch failed');
      return new Response('{"success":true}', { status: 200 });
    };
    await new Tracker({ analyticsHost: 'https://rivulet.invalid/api', siteId: 1, apiKey: API_KEY, fetch, retryBaseDelayMs: 1, throwOnError: true }).pageview();
    assert.equal(n, 3);
  });

  test('must be a function', () => {
    assert.throws(() => new Tracker({ analyticsHost: 'http://x/api', siteId: 1, apiKey: API_KEY, fetch: 'no' as never }), /"fetch" must be a function/);
  });
});
