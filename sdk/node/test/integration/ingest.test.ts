// End-to-end: SDK -> real rivulet-ingest -> Kafka -> enricher -> ClickHouse.
// Run with `npm run test:integration` and these variables set (e.g. from .stack/env):
//   RIVULET_INGEST_URL  e.g. http://127.0.0.1:3000 (the SDK's analyticsHost is that + /api)
//   RIVULET_SITE_ID, RIVULET_API_KEY   a site and a live key of it
//   CLICKHOUSE_URL      e.g. http://127.0.0.1:18123
//   CLICKHOUSE_DB       e.g. rivulet
// Optional: CLICKHOUSE_USER, CLICKHOUSE_PASSWORD, RIVULET_IT_WAIT_MS (default 30000).
// Without them the run fails (it never skips): a green run must mean the pipeline was tested.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { Tracker, type DropReason, type Payload, type TrackerError } from 'rivulet-node';

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
    const payload: Required<Omit<Payload, 'event_id' | 'timestamp'>> = {
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
    const tracker = new Tracker({
      ...options,
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
