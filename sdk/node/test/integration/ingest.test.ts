// End-to-end: SDK -> real rivulet-ingest -> Kafka -> enricher -> ClickHouse.
// Run with `npm run test:integration` and these variables set (e.g. from .stack/env):
//   RIVULET_INGEST_URL  e.g. http://127.0.0.1:3000 (the SDK's analyticsHost is that + /api)
//   RIVULET_SITE_ID, RIVULET_API_KEY   a site and a live key of it
//   CLICKHOUSE_URL      e.g. http://127.0.0.1:18123
//   CLICKHOUSE_DB       e.g. rivulet
// Optional: CLICKHOUSE_USER, CLICKHOUSE_PASSWORD, RIVULET_IT_WAIT_MS (default 30000).
// Without them the run fails (it never skips): a green run must mean the pipeline was tested.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Tracker, type DropReason, type FetchFunction, type IdentifyOptions, type Payload, type TrackerError, type Traits } from 'rivulet-node';

const packageRoot = fileURLToPath(new URL('../../../', import.meta.url));

const REQUIRED = ['RIVULET_INGEST_URL', 'RIVULET_SITE_ID', 'RIVULET_API_KEY', 'CLICKHOUSE_URL', 'CLICKHOUSE_DB'] as const;
const missing = REQUIRED.filter((name) => !process.env[name]);

if (missing.length > 0) {
  test('integration environment', () => {
    assert.fail(
      `npm run test:integration needs a running ingest and ClickHouse; missing environment: ${missing.join(', ')}. ` +
        'Set RIVULET_INGEST_URL (e.g. http://127.0.0.1:3000), RIVULET_SITE_ID, RIVULET_API_KEY, ' +
        'CLICKHOUSE_URL (e.g. http://127.0.0.1:18123) and CLICKHOUSE_DB (rivulet).',
    );
  });
} else {
  const env = process.env as Record<(typeof REQUIRED)[number], string>;
  const analyticsHost = `${env.RIVULET_INGEST_URL.replace(/\/+$/, '')}/api`;
  const siteId = Number(env.RIVULET_SITE_ID);
  const waitMs = Number(process.env.RIVULET_IT_WAIT_MS ?? 30_000);
  // One marker per run, so rows of earlier runs are never counted.
  const marker = `sdk-it-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;

  const options = { analyticsHost, siteId: env.RIVULET_SITE_ID, apiKey: env.RIVULET_API_KEY };

  test('a pageview arrives with every payload field', async (t) => {
    const payload: Required<Omit<Payload, 'event_id' | 'timestamp' | 'anonymousId'>> = {
      hostname: 'sdk-it.example.com',
      pathname: `/sdk-it/${marker}/pricing`,
      querystring: '?utm_source=newsletter&x=%20y',
      screenWidth: 1440,
      screenHeight: 900,
      language: 'en-GB',
      page_title: 'Pricing — Rivulet «SDK» test',
      referrer: 'https://www.google.com/search?q=rivulet',
      user_id: `${marker}-pv`,
      user_agent:
        'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36',
      ip_address: '81.2.69.142',
    };
    const sentAt = Math.floor(Date.now() / 1000);
    await new Tracker({ ...options, throwOnError: true }).pageview(payload);

    const row = await pollOne(`user_id = ${sql(payload.user_id)}`);
    assert.equal(row.type, 'pageview');
    assert.equal(row.hostname, payload.hostname);
    assert.equal(row.pathname, payload.pathname);
    assert.equal(row.querystring, payload.querystring);
    assert.equal(Number(row.screen_width), payload.screenWidth);
    assert.equal(Number(row.screen_height), payload.screenHeight);
    assert.equal(row.language, payload.language);
    assert.equal(row.page_title, payload.page_title);
    assert.equal(row.referrer, payload.referrer);
    assert.equal(row.user_id, payload.user_id);
    assert.ok(Math.abs(Number(row.ts) - sentAt) <= 5, `timestamp ${row.ts} is the time of the call (${sentAt})`);
    // user_agent and ip_address are not stored as such; their enrichment shows they arrived.
    assert.equal(row.browser, 'Chrome', `user_agent was parsed (browser "${row.browser}"; is UA_REGEXES set for the enricher?)`);
    assert.equal(row.operating_system, 'Windows');
    if (row.country === '') t.diagnostic('country is empty: no geo database configured for the enricher, ip_address not checked');
    else assert.equal(row.country, 'GB', 'ip_address 81.2.69.142 resolves to GB');
  });

  test('a custom event arrives with its properties string byte-for-byte', async () => {
    const properties = {
      plan: 'pro',
      'quote"d key': 'a "quoted" value with \\ backslash',
      unicode: 'ünïcödé 😀 日本語',
      amount: 49.99,
      annual: true,
      tags: ['x', 2, false],
    };
    const payload: Payload = { pathname: `/sdk-it/${marker}/signup`, hostname: 'sdk-it.example.com', user_id: `${marker}-ev` };
    await new Tracker({ ...options, throwOnError: true }).event('sdk_it_signup', payload, properties);

    const row = await pollOne(`user_id = ${sql(`${marker}-ev`)}`);
    assert.equal(row.type, 'custom_event');
    assert.equal(row.event_name, 'sdk_it_signup');
    assert.equal(row.properties, JSON.stringify(properties));
    assert.equal(row.pathname, payload.pathname);
    assert.equal(row.hostname, payload.hostname);
  });

  test('batch mode delivers 10,000 events, none missing or doubled', async () => {
    const total = 10_000;
    const userId = `${marker}-batch`;
    const drops: DropReason[] = [];
    const errors: TrackerError[] = [];
    let gzipped = 0;
    const countingFetch: FetchFunction = (url, init) => {
      if (init.headers['content-encoding'] === 'gzip') gzipped++;
      return fetch(url, init);
    };
    const tracker = new Tracker({
      ...options,
      fetch: countingFetch,
      batch: { flushAt: 500, maxQueueSize: total },
      onDrop: (_ev, reason) => drops.push(reason),
      onError: (err) => errors.push(err),
    });
    for (let i = 0; i < total; i++) {
      await tracker.event('sdk_it_batch', { user_id: userId, pathname: `/sdk-it/${marker}/batch/${i}` }, { i });
    }
    await tracker.shutdown(120_000);
    assert.deepEqual(errors.map((e) => e.message), [], 'no delivery errors');
    assert.deepEqual(drops, [], 'no drops');
    assert.equal(tracker.stats().delivered, total);
    assert.ok(gzipped >= total / 500, `${gzipped} gzipped batch requests (gzip is on by default)`);

    const where = `site_id = ${siteId} AND user_id = ${sql(userId)}`;
    let counts = { c: 0, u: 0 };
    const deadline = Date.now() + Math.max(waitMs, 60_000);
    while (Date.now() < deadline) {
      const [row] = await clickhouse(`SELECT count() AS c, uniqExact(event_id) AS u FROM events FINAL WHERE ${where}`);
      counts = { c: Number(row?.c ?? 0), u: Number(row?.u ?? 0) };
      if (counts.c >= total) break;
      await sleep(1000);
    }
    assert.equal(counts.c, total, `rows for ${userId} (FINAL)`);
    assert.equal(counts.u, total, 'distinct event_ids');
    const [paths] = await clickhouse(`SELECT uniqExact(pathname) AS p FROM events FINAL WHERE ${where}`);
    assert.equal(Number(paths?.p), total, 'every event arrived, not a duplicate of another');
  });

  test("the SDK's checks of event_id, timestamp and ip_address agree with the server's", async () => {
    // Each value straight to /api/track (the server's verdict) and through the SDK (its verdict).
    const cases: Record<'event_id' | 'timestamp' | 'ip_address', unknown[]> = {
      event_id: ['0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a', '0B0E3A1C6F0E4C8E9A5E2F6A1D3C4B5A', '{0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a}',
        'URN:uuid:0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a', '', 'nope', '00000000-0000-0000-0000-000000000000', '0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5', ' 0b0e3a1c-6f0e-4c8e-9a5e-2f6a1d3c4b5a'],
      timestamp: ['2026-01-02T03:04:05Z', '2026-01-02t03:04:05.123456789z', '2026-01-02 03:04:05+05:30', '2016-12-31T23:59:60Z', '2017-01-01T00:59:60+01:00',
        '2024-02-29T00:00:00Z', 'yesterday', '2026-01-02', '2026-01-02T03:04:05', '2026-01-02T03:04:05.Z', '2023-02-29T00:00:00Z', '2026-01-15T12:00:60Z',
        '2026-01-02T03:04:05+24:00', '2026-01-02T03:04:05+0100', '2026-01-02é03:04:05Z', 1_767_323_045_678, 0, -5, 1.5],
      ip_address: ['81.2.69.142', '::', '::ffff:1.2.3.4', '1:2:3:4:5:6:1.2.3.4', '1:2:3:4:5:6:7::', '', '01.2.3.4', '256.1.1.1', 'fe80::1%eth0', '1.2.3.4::',
        '1:2:3:4:5:6:7:1.2.3.4', ' 1.2.3.4', '12345::'],
    };
    const sdk = new Tracker({ ...options, disabled: true, throwOnError: true });
    const disagreements: string[] = [];
    for (const [field, values] of Object.entries(cases)) {
      for (const value of values) {
        const res = await fetch(`${analyticsHost}/track`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ api_key: env.RIVULET_API_KEY, site_id: env.RIVULET_SITE_ID, user_id: `${marker}-agree`, [field]: value }),
        });
        await res.text();
        const serverOk = res.status === 200;
        assert.ok(res.status === 200 || res.status === 400, `unexpected ${res.status}`);
        const sdkOk = await sdk.pageview({ [field]: value } as Payload).then(() => true, () => false);
        if (serverOk !== sdkOk) disagreements.push(`${field} ${JSON.stringify(value)}: server ${serverOk ? 'accepts' : 'rejects'}, SDK ${sdkOk ? 'accepts' : 'rejects'}`);
      }
    }
    assert.deepEqual(disagreements, []);
  });

  test("a caller's event_id and timestamp are stored, and sending the event twice stores it once", async () => {
    const eventId = randomUUID();
    const when = new Date(Date.now() - 3_600_000); // an hour ago: inside the server's window
    when.setMilliseconds(0);
    const tracker = new Tracker({ ...options, throwOnError: true });
    const payload: Payload = { user_id: `${marker}-outbox`, pathname: '/outbox', event_id: eventId, timestamp: when };
    await tracker.event('outbox_send', payload);
    await tracker.event('outbox_send', payload); // an outbox retry after a lost answer
    const batch = new Tracker({ ...options, batch: true });
    await batch.event('outbox_send', payload);
    await batch.shutdown();
    const row = await pollOne(`user_id = ${sql(`${marker}-outbox`)}`);
    assert.equal(Number(row.ts), when.getTime() / 1000, 'the caller timestamp');
    const [ids] = await clickhouse(`SELECT count() AS c, any(toString(event_id)) AS id FROM events FINAL WHERE site_id = ${siteId} AND user_id = ${sql(`${marker}-outbox`)}`);
    assert.equal(Number(ids?.c), 1, 'one row for three sends');
    assert.equal(ids?.id, eventId);
  });

  test("an event without user_agent is treated as having none: the SDK's own User-Agent is not the visitor's", async () => {
    // Ingest must not take a server SDK's User-Agent header (rivulet-node/x.y.z) for the
    // visitor's browser. Without user_id, the visitor id hashes the IP and the user agent, so
    // an event without user_agent must get the same visitor id and device fields as one
    // with an explicitly empty user_agent.
    const tracker = new Tracker({ ...options, throwOnError: true });
    const ip = '192.0.2.77';
    await tracker.pageview({ pathname: `/sdk-it/${marker}/no-ua`, ip_address: ip });
    await tracker.pageview({ pathname: `/sdk-it/${marker}/empty-ua`, ip_address: ip, user_agent: '' });
    const fields = 'user_id, browser, browser_version, operating_system, operating_system_version, device_type, is_bot';
    const noUa = await pollRow(`pathname = ${sql(`/sdk-it/${marker}/no-ua`)}`, fields);
    const emptyUa = await pollRow(`pathname = ${sql(`/sdk-it/${marker}/empty-ua`)}`, fields);
    assert.deepEqual(
      { browser: noUa.browser, os: noUa.operating_system, bot: Number(noUa.is_bot) },
      { browser: '', os: '', bot: 0 },
      `device fields of an SDK event without user_agent: ${JSON.stringify(noUa)}`,
    );
    assert.deepEqual(noUa, emptyUa, 'the same visitor id and device fields as an event with an empty user_agent');
  });

  test('anonymousId arrives as the anonymous_id of pageviews and custom events, single and batch', async () => {
    const anonymousId = `${marker}-anon-ev`;
    const single = new Tracker({ ...options, throwOnError: true });
    await single.pageview({ pathname: `/sdk-it/${marker}/anon/pageview`, anonymousId });
    await single.event('sdk_it_anon', { pathname: `/sdk-it/${marker}/anon/event`, anonymousId, user_id: `${marker}-anon-user` });
    const batch = new Tracker({ ...options, batch: true, throwOnError: true });
    await batch.pageview({ pathname: `/sdk-it/${marker}/anon/batch`, anonymousId });
    await batch.shutdown();
    for (const kind of ['pageview', 'event', 'batch']) {
      const row = await pollRow(`pathname = ${sql(`/sdk-it/${marker}/anon/${kind}`)}`, 'anonymous_id, user_id');
      assert.equal(row.anonymous_id, anonymousId, `${kind}: anonymous_id stored`);
    }
  });

  // Where the server keeps aliases and traits is not part of the wire contract (only POST
  // /api/identify is), so identify is checked at the API: every call answered 200, a resend
  // with the same event_id and timestamp too, and the same verdicts as the SDK's checks.
  test('identify answers 200 in single and batch mode, and the same call sent again answers 200', async () => {
    const statuses: { path: string; status: number; eventId: string }[] = [];
    const recording: FetchFunction = async (url, init) => {
      const res = await fetch(url, init);
      // Identify bodies are never gzipped; a gzipped batch body has no single event_id anyway.
      const body = typeof init.body === 'string' ? (JSON.parse(init.body) as { event_id?: string }) : {};
      statuses.push({ path: new URL(url).pathname, status: res.status, eventId: body.event_id ?? '' });
      return res;
    };
    const userId = `${marker}-identify`;
    const traits: Traits = { plan: 'pro', seats: 5, company: { name: 'Acme «SDK»', tags: ['b2b', 'eu'] }, churned_at: null };
    const call: IdentifyOptions = { anonymousId: `${marker}-anon-1`, event_id: randomUUID(), timestamp: new Date(Date.now() - 60_000) };
    const single = new Tracker({ ...options, fetch: recording, throwOnError: true, maxRetries: 0 });
    await single.identify(userId, traits, call);
    // What a retry after a lost answer does: the same event_id and timestamp again.
    await single.identify(userId, traits, call);
    // A second anonymous id merges into the same user; a null trait removes it.
    await single.identify(userId, { plan: null }, { anonymousId: `${marker}-anon-2` });

    const drops: DropReason[] = [];
    const errors: TrackerError[] = [];
    const batch = new Tracker({ ...options, fetch: recording, batch: true, onDrop: (_i, r) => drops.push(r), onError: (e) => errors.push(e) });
    await batch.pageview({ pathname: `/sdk-it/${marker}/identify/before`, anonymousId: `${marker}-anon-3` });
    await batch.identify(userId, { source: 'batch' }, { anonymousId: `${marker}-anon-3` });
    await batch.shutdown(30_000);
    assert.deepEqual(errors.map((e) => e.message), []);
    assert.deepEqual(drops, []);
    assert.equal(batch.stats().delivered, 2);

    const identifies = statuses.filter((s) => s.path === '/api/identify');
    assert.deepEqual(identifies.map((s) => s.status), [200, 200, 200, 200], 'every identify answered 200');
    assert.equal(identifies[0]!.eventId, call.event_id);
    assert.equal(identifies[1]!.eventId, call.event_id, 'the resend carried the same event_id');
    assert.ok(statuses.some((s) => s.path === '/api/track/batch' && s.status === 200), 'the pageview went in a batch of its own');
  });

  test("the SDK's checks of identify agree with the server's", async () => {
    // Each case straight to /api/identify (the server's verdict) and through the SDK (its verdict).
    const base = { user_id: `${marker}-agree-id` };
    const cases: { name: string; body: Record<string, unknown>; args: [unknown, unknown?, unknown?] }[] = [
      { name: 'user_id ok', body: {}, args: [base.user_id] },
      { name: 'user_id 255 chars', body: { user_id: 'é'.repeat(255) }, args: ['é'.repeat(255)] },
      { name: 'user_id 256 chars', body: { user_id: 'é'.repeat(256) }, args: ['é'.repeat(256)] },
      { name: 'user_id empty', body: { user_id: '' }, args: [''] },
      { name: 'user_id a number', body: { user_id: 42 }, args: [42] },
      { name: 'anonymous_id 255 chars', body: { anonymous_id: 'é'.repeat(255) }, args: [base.user_id, undefined, { anonymousId: 'é'.repeat(255) }] },
      { name: 'anonymous_id 256 chars', body: { anonymous_id: 'é'.repeat(256) }, args: [base.user_id, undefined, { anonymousId: 'é'.repeat(256) }] },
      { name: 'traits 2048 chars', body: { traits: { k: 'é'.repeat(2040) } }, args: [base.user_id, { k: 'é'.repeat(2040) }] },
      { name: 'traits 2049 chars', body: { traits: { k: 'é'.repeat(2041) } }, args: [base.user_id, { k: 'é'.repeat(2041) }] },
      { name: 'traits with null and nesting', body: { traits: { a: null, b: { c: [1, 'x', null] } } }, args: [base.user_id, { a: null, b: { c: [1, 'x', null] } }] },
      { name: 'traits an array', body: { traits: ['a'] }, args: [base.user_id, ['a']] },
      { name: 'traits a string', body: { traits: 'plan=pro' }, args: [base.user_id, 'plan=pro'] },
      { name: 'event_id ok', body: { event_id: randomUUID() }, args: [base.user_id, undefined, { event_id: randomUUID() }] },
      { name: 'event_id bad', body: { event_id: 'nope' }, args: [base.user_id, undefined, { event_id: 'nope' }] },
      { name: 'timestamp ok', body: { timestamp: '2026-01-02T03:04:05Z' }, args: [base.user_id, undefined, { timestamp: '2026-01-02T03:04:05Z' }] },
      { name: 'timestamp bad', body: { timestamp: 'yesterday' }, args: [base.user_id, undefined, { timestamp: 'yesterday' }] },
    ];
    const sdk = new Tracker({ ...options, disabled: true, throwOnError: true });
    const disagreements: string[] = [];
    for (const c of cases) {
      const res = await fetch(`${analyticsHost}/identify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ api_key: env.RIVULET_API_KEY, site_id: env.RIVULET_SITE_ID, ...base, ...c.body }),
      });
      await res.text();
      assert.ok(res.status === 200 || res.status === 400, `${c.name}: unexpected ${res.status}`);
      const serverOk = res.status === 200;
      const [userId, traits, opts] = c.args;
      const sdkOk = await sdk.identify(userId as string, traits as Traits, opts as IdentifyOptions).then(() => true, () => false);
      if (serverOk !== sdkOk) disagreements.push(`${c.name}: server ${serverOk ? 'accepts' : 'rejects'}, SDK ${sdkOk ? 'accepts' : 'rejects'}`);
    }
    assert.deepEqual(disagreements, []);
  });

  test('serverless: a handler that awaits flush() before the process is frozen loses nothing', async () => {
    const userId = `${marker}-lambda`;
    const script = `
      import { Tracker } from 'rivulet-node';
      const tracker = new Tracker({ analyticsHost: ${JSON.stringify(analyticsHost)}, siteId: ${JSON.stringify(env.RIVULET_SITE_ID)},
        apiKey: process.env.RIVULET_API_KEY, batch: true });
      export async function handler(event) {
        for (let i = 0; i < 20; i++) tracker.pageview({ user_id: ${JSON.stringify(userId)}, pathname: event.path + '/' + i });
        await tracker.flush();
        return { statusCode: 200 };
      }
      await handler({ path: '/lambda' });
      process.exit(0); // the platform freezes the process as soon as the handler returns
    `;
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: packageRoot, stdio: 'inherit' });
      child.on('error', reject);
      child.on('exit', resolve);
    });
    assert.equal(code, 0);
    const deadline = Date.now() + waitMs;
    let count = 0;
    while (Date.now() < deadline) {
      const [row] = await clickhouse(`SELECT count() AS c FROM events FINAL WHERE site_id = ${siteId} AND user_id = ${sql(userId)}`);
      count = Number(row?.c ?? 0);
      if (count >= 20) break;
      await sleep(500);
    }
    assert.equal(count, 20);
  });

  /** Waits for one row matching `where` and returns `fields` of it. */
  async function pollRow(where: string, fields: string): Promise<Record<string, string | number>> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const rows = await clickhouse(`SELECT ${fields} FROM events FINAL WHERE site_id = ${siteId} AND ${where}`);
      if (rows.length > 0) return rows[0]!;
      if (Date.now() > deadline) assert.fail(`no row with ${where} in ClickHouse after ${waitMs} ms (is the enricher running?)`);
      await sleep(500);
    }
  }

  /** Waits for exactly one row of this site matching `where`, up to RIVULET_IT_WAIT_MS. */
  async function pollOne(where: string): Promise<Record<string, string | number>> {
    const query =
      'SELECT type, event_name, properties, hostname, pathname, querystring, page_title, referrer, user_id, ' +
      'language, screen_width, screen_height, country, browser, operating_system, toUnixTimestamp(timestamp) AS ts ' +
      `FROM events FINAL WHERE site_id = ${siteId} AND ${where}`;
    const deadline = Date.now() + waitMs;
    for (;;) {
      const rows = await clickhouse(query);
      if (rows.length > 0) {
        assert.equal(rows.length, 1, 'exactly one row');
        return rows[0]!;
      }
      if (Date.now() > deadline) assert.fail(`no row with ${where} in ClickHouse after ${waitMs} ms (is the enricher running?)`);
      await sleep(500);
    }
  }

  /** Runs a query over ClickHouse's HTTP interface (works with 18.16: no JSONExtract, FINAL for dedup). */
  async function clickhouse(query: string): Promise<Record<string, string | number>[]> {
    const url = new URL(env.CLICKHOUSE_URL);
    url.searchParams.set('database', env.CLICKHOUSE_DB);
    if (process.env.CLICKHOUSE_USER) url.searchParams.set('user', process.env.CLICKHOUSE_USER);
    if (process.env.CLICKHOUSE_PASSWORD) url.searchParams.set('password', process.env.CLICKHOUSE_PASSWORD);
    const res = await fetch(url, { method: 'POST', body: `${query} FORMAT JSONEachRow` });
    const text = await res.text();
    if (!res.ok) throw new Error(`ClickHouse answered ${res.status}: ${text.slice(0, 500)}`);
    return text
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as Record<string, string | number>);
  }
}

/** A ClickHouse string literal. */
function sql(value: string): string {
  return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
