// script.js end to end: Debian's chromium (driven by playwright-core) runs the script as
// a site embeds it, against the REAL rivulet-ingest and rivulet-enricher and the stack's
// Kafka and ClickHouse; what the browser sent is read back from the events table.
//
// Hosts, all 127.0.0.1 through --host-resolver-rules, so that each is an origin of its own:
//   rivulet.example:INGEST  the ingest this test starts: GET /api/script.js, POST /api/track
//   shop.example:PAGES      the site's domain: test pages that embed the script
//   other.example:PAGES     a domain no site lists: the same pages, refused
//   blog.example:PAGES      added to the site's domains during the run (sites update)
//   partner.example:PAGES   the target of an outbound link
// PAGES is one local HTTP server of this test.
//
// The test starts its own ingest and enricher (this checkout's builds, free ports) rather
// than use scripts/run-services' (127.0.0.1:3000):
//  - the script under test is the copy the ingest binary embeds: a service left running
//    may be an older build (the test first checks that GET /api/script.js is
//    ingest/assets/script.js);
//  - nothing that others run on the same stack is stopped, restarted or clashed with;
//  - AUTH_FAILURE_BURST=0: the test's deliberate 403s all come from 127.0.0.1, and ingest
//    otherwise answers an address 429 after 20 refusals.
// The site directory keeps its default refresh (30 s): a domain accepted within seconds of
// `rivulet-admin sites update` is the change announced on Redis, not the periodic reread.
// The enricher joins the stack's consumer group (rivulet-enricher on events.raw), as the
// Rust integration tests' do: a group of its own would start at the topic's earliest
// offset and write every retained event again. Whichever member holds the partition writes
// the rows; every check here reads them from ClickHouse.
//
// Needs: the local stack (RIVULET_STACK_DIR, default ../../.stack: its env file),
// target/debug/rivulet-{admin,ingest,enricher} (cargo build; RIVULET_BIN_DIR to use
// others), /usr/bin/chromium (CHROMIUM_PATH), `npm ci` here. Without them it fails, saying
// what is missing. Logs of the services: $RIVULET_STACK_DIR/logs/tests/*-browser-e2e-*.log.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const stackDir = process.env.RIVULET_STACK_DIR || path.join(root, '.stack');
const binDir = process.env.RIVULET_BIN_DIR || path.join(root, 'target/debug');
const chromiumPath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SCRIPT = path.join(root, 'ingest/assets/script.js');
/** MaxMind's test database (the enricher's here) places this address in GB. */
const GEO_TEST_DB = path.join(root, 'testdata/geo/GeoLite2-City-Test.mmdb');
const GB_IP = '81.2.69.142';
const FIREFOX_ON_WINDOWS = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:128.0) Gecko/20100101 Firefox/128.0';
const SITE_DOMAIN = 'shop.example';
const UNKNOWN_DOMAIN = 'other.example';
const ADDED_DOMAIN = 'blog.example';
/** How long an event may take from the browser to ClickHouse (a rebalance included). */
const STORED_WITHIN_MS = 30_000;
/** `sites update` to the new domain accepted: the announcement, not the 30 s reread. */
const ACCEPTED_WITHIN_MS = 3_000;
const run = `${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;

const stackEnv = readEnvFile(path.join(stackDir, 'env'));
const logDir = path.join(stackDir, 'logs/tests');

let siteId;
let apiKey;
let ingest;
let enricher;
let pages;
let pagesPort;
let browser;

const ingestOrigin = () => `http://rivulet.example:${ingest.port}`;
const origin = (host) => `http://${host}:${pagesPort}`;

// --- the stack, the binaries and the services ----------------------------------------------

function readEnvFile(file) {
  assert.ok(fs.existsSync(file), `${file} is missing: start the local stack (scripts/stack up) or set RIVULET_STACK_DIR`);
  const env = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = line.match(/^\s*([A-Za-z0-9_]+)=(.*)$/);
    if (m) env[m[1]] = m[2].trim();
  }
  return env;
}

function binary(name) {
  const bin = path.join(binDir, name);
  assert.ok(fs.existsSync(bin), `${bin} is missing: run cargo build --workspace --bins (or set RIVULET_BIN_DIR)`);
  return bin;
}

const serviceEnv = (extra) => ({ ...process.env, ...stackEnv, ...extra });

/** `rivulet-admin ARGS…` with the stack's environment: its JSON output. */
async function admin(...args) {
  try {
    const { stdout } = await promisify(execFile)(binary('rivulet-admin'), args, { env: serviceEnv({}) });
    return JSON.parse(stdout);
  } catch (e) {
    throw new Error(`rivulet-admin ${args.join(' ')} failed: ${e.stderr || e.message}`);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts rivulet-NAME with the stack's environment and `env`, its output in a log file;
 * stdin is its lifeline (closing it asks for a graceful shutdown). Resolves once
 * `readyUrl` answers 200; fails at once, with the log's end, if the process exits first.
 */
async function startService(name, env, readyUrl) {
  fs.mkdirSync(logDir, { recursive: true });
  const log = path.join(logDir, `${name}-browser-e2e-${run}.log`);
  const out = fs.openSync(log, 'w');
  const child = spawn(binary(`rivulet-${name}`), [], {
    env: serviceEnv({ RUST_LOG: 'info', RIVULET_STDIN_LIFELINE: '1', ...env }),
    stdio: ['pipe', out, out],
  });
  fs.closeSync(out);
  let exit = null;
  const exited = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      exit = signal || `exit code ${code}`;
      resolve();
    }),
  );
  const svc = {
    log,
    stop: async () => {
      if (exit) return;
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
  const tail = () => fs.readFileSync(log, 'utf8').split('\n').slice(-15).join('\n');
  const end = Date.now() + 60_000;
  for (;;) {
    if (exit) throw new Error(`rivulet-${name} exited during startup (${exit}); end of ${log}:\n${tail()}`);
    try {
      if ((await fetch(readyUrl)).status === 200) return svc;
    } catch {
      // not listening yet
    }
    if (Date.now() > end) {
      await svc.stop();
      throw new Error(`rivulet-${name} not ready within 60 s; end of ${log}:\n${tail()}`);
    }
    await sleep(150);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One HTTP exchange with node:http (which lets a test set Origin): {status, headers, body}. */
function request(method, url, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A POST to the ingest from Node, as the browser sends it (a JSON string as text/plain). */
const postTrack = (event, headers = {}) =>
  request('POST', `http://127.0.0.1:${ingest.port}/api/track`, {
    headers: { 'content-type': 'text/plain;charset=UTF-8', ...headers },
    body: JSON.stringify({ site_id: String(siteId), ...event }),
  });

// --- ClickHouse ------------------------------------------------------------------------------

/** Rows of `sql` (JSONEachRow) over ClickHouse's HTTP interface, with the stack's credentials. */
async function clickhouse(sql) {
  const url = new URL(stackEnv.CLICKHOUSE_URL);
  url.searchParams.set('database', stackEnv.CLICKHOUSE_DB);
  const credentials = Buffer.from(`${stackEnv.CLICKHOUSE_USER}:${stackEnv.CLICKHOUSE_PASSWORD ?? ''}`);
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Basic ${credentials.toString('base64')}` },
    body: `${sql} FORMAT JSONEachRow`,
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`ClickHouse answered ${res.status}: ${text.slice(0, 300)}`);
  return text
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
}

const COLUMNS =
  'type, event_name, properties, hostname, pathname, querystring, page_title, referrer, language, ' +
  'screen_width, screen_height, user_id, browser, browser_version, operating_system, ' +
  'device_type, is_bot, country, ip, lcp, cls, inp, fcp, ttfb';

/** A ClickHouse string literal. */
const sql = (s) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** The site's rows (deduplicated: FINAL) that match `where`. */
const rowsWhere = (where) =>
  clickhouse(`SELECT ${COLUMNS} FROM events FINAL WHERE site_id = ${siteId} AND (${where})`);

/**
 * Polls the site's rows matching `where` until `complete(rows)` holds; fails after
 * STORED_WITHIN_MS with what it found.
 */
async function storedRows(what, where, complete) {
  const end = Date.now() + STORED_WITHIN_MS;
  for (;;) {
    const rows = await rowsWhere(where);
    if (complete(rows)) return rows;
    if (Date.now() > end) {
      const found = JSON.stringify(rows.map((r) => [r.type, r.event_name, r.hostname, r.pathname]));
      throw new Error(`${what}: not in ClickHouse within ${STORED_WITHIN_MS} ms; found ${found}`);
    }
    await sleep(250);
  }
}

// --- the pages ---------------------------------------------------------------------------------

/** A page of the shop that embeds script.js as the README says. */
function shopPage(title) {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${title}</title>
<script src="${ingestOrigin()}/api/script.js" data-site-id="${siteId}" defer></script>
</head><body>
<h1>Rivulet test shop</h1>
<p>Shoes, boots and everything in between. This paragraph is the largest thing the page paints.</p>
<button id="slow">Add to cart (slow)</button>
<button id="broken">Checkout (broken)</button>
<p><a id="out" href="${origin('partner.example')}/landing?from=shop">Visit our partner</a></p>
<script>
  // An interaction that takes 150 ms: what INP measures.
  document.getElementById('slow').addEventListener('click', () => {
    const end = performance.now() + 150;
    while (performance.now() < end);
  });
  // A bug: an uncaught TypeError.
  document.getElementById('broken').addEventListener('click', () => {
    const cart = null;
    cart.checkout();
  });
  // A layout shift: a banner pushes the content down after load.
  addEventListener('load', () => setTimeout(() => {
    const banner = document.createElement('div');
    banner.style.height = '160px';
    banner.textContent = 'Sale!';
    document.body.prepend(banner);
  }, 100));
</script>
</body></html>`;
}

const PAGE_HOSTS = [SITE_DOMAIN, UNKNOWN_DOMAIN, ADDED_DOMAIN];

function servePage(req, res) {
  const url = new URL(req.url, `http://${req.headers.host}`);
  const send = (status, body) => {
    res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
    res.end(body);
  };
  if (url.hostname === 'partner.example') return send(200, '<!doctype html><title>Partner</title><h1>Partner</h1>');
  if (!PAGE_HOSTS.includes(url.hostname) || url.pathname === '/favicon.ico') return send(404, 'not found');
  send(200, shopPage(url.pathname === '/about' ? 'About us' : 'Shop home'));
}

/**
 * A new browser context and page. The page keeps what the script hands to sendBeacon in
 * window.__sent (to wait for a send without sleeping); the status of every answer of the
 * ingest to a POST is recorded with its event (`responses`), sendBeacon's included.
 * (Playwright reports a beacon's status but not always its headers: CORS headers are
 * checked by the browser itself, with fetches whose answer a page may read only if they
 * are right.)
 */
async function newPage() {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 800 },
    screen: { width: 1920, height: 1080 },
  });
  await context.addInitScript(() => {
    window.__sent = [];
    const beacon = navigator.sendBeacon.bind(navigator);
    navigator.sendBeacon = (url, data) => {
      window.__sent.push(JSON.parse(data));
      return beacon(url, data);
    };
  });
  const responses = [];
  context.on('response', (r) => {
    if (r.request().method() !== 'POST' || !r.url().startsWith(`${ingestOrigin()}/api/`)) return;
    let event;
    try {
      event = JSON.parse(r.request().postData());
    } catch {
      event = {};
    }
    responses.push({ status: r.status(), kind: r.request().resourceType(), event });
  });
  const page = await context.newPage();
  page.on('pageerror', () => {}); // the page's own deliberate errors
  return { context, page, responses };
}

/** Waits until the script has handed `n` events of `type` to sendBeacon. */
const sent = (page, type, n) =>
  page.waitForFunction(([t, k]) => window.__sent.filter((e) => e.type === t).length >= k, [type, n], {
    timeout: 10_000,
  });

/** Waits until the ingest has answered a POST of this context whose event matches `match`. */
async function answer(responses, what, match) {
  const end = Date.now() + 10_000;
  for (;;) {
    const found = responses.find((r) => match(r.event));
    if (found) return found;
    if (Date.now() > end)
      throw new Error(`no answer to ${what}; answers: ${JSON.stringify(responses.map((r) => [r.status, r.event]))}`);
    await sleep(50);
  }
}

/** Two frames painted: an interaction's Event Timing entry (INP) exists only after that. */
const painted = (page) =>
  page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 50)))));

/** What the enricher makes of this browser's User-Agent header (uap-core's families). */
function parsedAgent(userAgent) {
  const headless = userAgent.match(/HeadlessChrome\/(\d+)/);
  const chrome = userAgent.match(/Chrom(?:e|ium)\/(\d+)/);
  assert.ok(chrome, `a Chromium user agent: ${userAgent}`);
  // Headless Chromium says so in its user agent, and the enricher counts automation as bots.
  return headless
    ? { browser: 'HeadlessChrome', browser_version: headless[1], device_type: 'Bot', is_bot: 1 }
    : { browser: 'Chrome', browser_version: chrome[1], device_type: 'Desktop', is_bot: 0 };
}

// --- setup -------------------------------------------------------------------------------------

before(async () => {
  assert.ok(fs.existsSync(SCRIPT), `${SCRIPT} is missing: run npm run build`);
  assert.ok(
    fs.existsSync(chromiumPath),
    `${chromiumPath} is missing: apt-get install -y --no-install-recommends chromium fonts-liberation (or set CHROMIUM_PATH)`,
  );
  for (const v of ['CLICKHOUSE_URL', 'CLICKHOUSE_DB', 'CLICKHOUSE_USER', 'REDIS_URL', 'KAFKA_BROKERS'])
    assert.ok(stackEnv[v], `${v} is not in ${stackDir}/env`);
  const sites = await admin('sites', 'list');
  const claiming = sites.filter((s) => !s.deleted && s.domains.includes(UNKNOWN_DOMAIN)).map((s) => s.site_id);
  assert.deepEqual(claiming, [], `${UNKNOWN_DOMAIN} must be unknown to every site (the preflight test relies on it)`);

  // The site exists before ingest starts: its directory has it from the first read.
  const site = await admin('sites', 'create', '--domain', SITE_DOMAIN, '--name', `browser e2e ${run}`);
  siteId = site.site_id;
  assert.deepEqual(site.domains, [SITE_DOMAIN]);
  apiKey = (await admin('keys', 'create', '--site', String(siteId))).api_key;

  const [port, internal, enricherPort] = [await freePort(), await freePort(), await freePort()];
  ingest = await startService(
    'ingest',
    {
      INGEST_ADDR: `127.0.0.1:${port}`,
      INGEST_INTERNAL_ADDR: `127.0.0.1:${internal}`,
      AUTH_FAILURE_BURST: '0',
    },
    `http://127.0.0.1:${internal}/_readiness`,
  );
  ingest.port = port;
  enricher = await startService(
    'enricher',
    { ENRICHER_ADDR: `127.0.0.1:${enricherPort}`, GEOIP_DB: GEO_TEST_DB, BATCH_MAX_AGE_MS: '200' },
    `http://127.0.0.1:${enricherPort}/_readiness`,
  );

  // The script the browser gets is this checkout's build.
  const script = await request('GET', `http://127.0.0.1:${port}/api/script.js`);
  assert.equal(script.status, 200);
  assert.ok(
    script.body.equals(fs.readFileSync(SCRIPT)),
    `${binDir}/rivulet-ingest serves another script.js than ingest/assets/script.js: rebuild it (cargo build -p rivulet-ingest)`,
  );

  pages = http.createServer(servePage);
  await new Promise((resolve) => pages.listen(0, '127.0.0.1', resolve));
  pagesPort = pages.address().port;
  const hosts = ['rivulet.example', 'partner.example', ...PAGE_HOSTS];
  browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      // The browser's own language, not Playwright's locale emulation: the emulation is
      // lost while a page is left for another site, and the vitals are sent just then.
      '--accept-lang=en-GB',
      `--host-resolver-rules=${hosts.map((h) => `MAP ${h} 127.0.0.1`).join(', ')}`,
    ],
  });
});

after(async () => {
  await browser?.close();
  await new Promise((resolve) => (pages ? pages.close(resolve) : resolve()));
  await ingest?.stop();
  await enricher?.stop();
  // The site's events stay (they are the run's evidence); tracking for it stops.
  if (siteId) await admin('sites', 'delete', String(siteId));
});

// --- the tests ---------------------------------------------------------------------------------

const VISIT =
  'the site: pageview, SPA navigations, custom event, error, outbound click, web vitals stored, ' +
  "with the request's user agent and address, never the body's";
test(VISIT, { timeout: 90_000 }, async () => {
  // The control: on the key path a body's ip_address and user_agent count, and this
  // pipeline locates the address in GB and reads the agent as Firefox on Windows.
  const control = await postTrack(
    { type: 'custom_event', event_name: 'control', pathname: '/control', ip_address: GB_IP, user_agent: FIREFOX_ON_WINDOWS },
    { authorization: `Bearer ${apiKey}` },
  );
  assert.equal(control.status, 200, control.body.toString());

  const { context, page, responses } = await newPage();
  const shop = origin(SITE_DOMAIN);
  await page.goto(`${shop}/?ref=ad`, { referer: 'https://search.example/?q=boots' });
  const agent = parsedAgent(await page.evaluate(() => navigator.userAgent));
  await sent(page, 'pageview', 1);
  // Two SPA navigations: pushState, then a hash route.
  await page.evaluate(() => {
    history.pushState({}, '', '/cart?step=1');
    document.title = 'Your cart';
  });
  await sent(page, 'pageview', 2);
  await page.evaluate(() => (location.hash = '#/checkout'));
  await sent(page, 'pageview', 3);
  await page.evaluate(() => window.rivulet.event('newsletter', { list: 'weekly', position: 2 }));
  await page.click('#slow');
  await painted(page);
  await page.click('#broken');
  await sent(page, 'error', 1);
  // A page that claims another address and agent in the body: a browser event, so both
  // are ignored. A fetch of the page's own, with credentials: the browser lets it read the
  // answer only with Access-Control-Allow-Origin the exact origin and -Credentials true.
  const spoof = await page.evaluate(
    async ({ url, body }) => {
      const r = await fetch(url, { method: 'POST', body, credentials: 'include' });
      return { status: r.status, body: await r.json() };
    },
    {
      url: `${ingestOrigin()}/api/track`,
      body: JSON.stringify({
        site_id: String(siteId),
        type: 'custom_event',
        event_name: 'spoof',
        hostname: SITE_DOMAIN,
        pathname: '/spoof',
        ip_address: GB_IP,
        user_agent: FIREFOX_ON_WINDOWS,
      }),
    },
  );
  assert.deepEqual(spoof, { status: 200, body: { success: true } });
  // Leaving through an outbound link: the outbound event, then the vitals on pagehide.
  await page.click('#out');
  await page.waitForURL(/partner\.example/);

  // [type, event_name], sorted.
  const want = [
    ['custom_event', 'newsletter'],
    ['custom_event', 'spoof'],
    ['error', 'TypeError'],
    ['outbound', ''],
    ['pageview', ''],
    ['pageview', ''],
    ['pageview', ''],
    ['performance', ''],
  ];
  const rows = await storedRows('the visit', `hostname = ${sql(SITE_DOMAIN)}`, (r) => r.length >= want.length);
  await context.close();
  assert.deepEqual(rows.map((r) => [r.type, r.event_name]).sort(), want);
  const of = (type, name = '') => rows.filter((r) => r.type === type && r.event_name === name);

  const pageviews = of('pageview').map((r) => [r.pathname, r.querystring, r.page_title]);
  assert.deepEqual(pageviews.sort(), [
    ['/', '?ref=ad', 'Shop home'],
    ['/cart', '?step=1', 'Your cart'],
    ['/checkout', '?step=1', 'Your cart'],
  ]);
  assert.equal(of('custom_event', 'newsletter')[0].properties, '{"list":"weekly","position":2}');
  const [error] = of('error', 'TypeError');
  const props = JSON.parse(error.properties);
  assert.match(props.message, /null/);
  assert.ok(props.fileName.startsWith(`${shop}/`), props.fileName);
  assert.ok(props.lineNumber > 0 && props.columnNumber > 0, error.properties);
  assert.match(props.stack, /TypeError/);
  assert.deepEqual(JSON.parse(of('outbound')[0].properties), {
    url: `${origin('partner.example')}/landing?from=shop`,
    text: 'Visit our partner',
    target: '_self',
  });
  const [perf] = of('performance');
  assert.deepEqual([perf.pathname, perf.querystring], ['/', '?ref=ad'], 'the vitals of the page as loaded');
  assert.ok(perf.lcp > 0 && perf.fcp > 0 && perf.ttfb > 0, JSON.stringify(perf));
  assert.ok(perf.cls > 0, `the banner shifted the page: cls ${perf.cls}`);
  assert.ok(perf.inp >= 150, `the slow click took 150 ms: inp ${perf.inp}`);
  for (const r of rows.filter((r) => r.type !== 'performance'))
    for (const metric of ['lcp', 'cls', 'inp', 'fcp', 'ttfb']) assert.equal(r[metric], null, `${r.type} ${metric}`);

  // Every row: the page's fields, and what ingest took from the request itself. (Not the
  // session id: sessions live in the memory of the enricher holding the partition, and
  // on a shared stack other tests' enrichers join and leave the group at any time.)
  const visitor = of('pageview')[0].user_id;
  for (const r of rows) {
    const where = `${r.type} ${r.event_name} ${r.pathname}`;
    assert.equal(r.hostname, SITE_DOMAIN, where);
    if (r.event_name !== 'spoof') {
      assert.equal(r.referrer, 'https://search.example/?q=boots', where);
      assert.equal(r.language, 'en-GB', where);
      assert.deepEqual([r.screen_width, r.screen_height], [1920, 1080], where);
    }
    assert.deepEqual(
      {
        browser: r.browser,
        browser_version: r.browser_version,
        device_type: r.device_type,
        is_bot: r.is_bot,
        operating_system: r.operating_system,
      },
      { ...agent, operating_system: 'Linux' },
      `${where}: the browser's own User-Agent header`,
    );
    assert.equal(r.country, '', `${where}: located from 127.0.0.1 (nowhere), not from ${GB_IP}`);
    // Empty unless the enricher stores addresses (STORE_IP); then the request's.
    assert.ok(['', '127.0.0.1'].includes(r.ip), `${where}: ip ${r.ip}`);
    // The visitor id is a hash of the site, the address and the user agent (and the day).
    assert.equal(r.user_id, visitor, `${where}: the same visitor as the pageview`);
  }
  const [controlRow] = await storedRows('the control event', "event_name = 'control'", (r) => r.length === 1);
  assert.deepEqual(
    [controlRow.country, controlRow.browser, controlRow.operating_system],
    ['GB', 'Firefox', 'Windows'],
    'on the key path the body counts: so the browser rows above ignored it',
  );

  // The ingest's answers to the page's beacons (those Playwright saw: not the ones sent
  // while the page was left): all accepted.
  const beacons = responses.filter((r) => r.kind === 'ping');
  assert.ok(beacons.length >= 5, `answers seen: ${JSON.stringify(responses)}`);
  assert.deepEqual(responses.filter((r) => r.status !== 200), []);
});

test('a tab closed: what the page sends by sendBeacon during pagehide is stored', { timeout: 60_000 }, async () => {
  const { context, page } = await newPage();
  // No fetch in this page: whatever arrives came by sendBeacon.
  await context.addInitScript(() => {
    window.fetch = () => Promise.reject(new TypeError('fetch is off in this test'));
  });
  await page.goto(`${origin(SITE_DOMAIN)}/about`);
  await sent(page, 'pageview', 1);
  await page.evaluate(() => addEventListener('pagehide', () => window.rivulet.event('leaving', { how: 'pagehide' })));
  await page.close({ runBeforeUnload: true });
  const rows = await storedRows(
    'the pagehide beacons',
    "pathname = '/about' AND type IN ('custom_event', 'performance')",
    (r) => r.length >= 2,
  );
  await context.close();
  assert.deepEqual(rows.map((r) => [r.type, r.event_name, r.properties]).sort(), [
    ['custom_event', 'leaving', '{"how":"pagehide"}'],
    ['performance', '', ''],
  ]);
  assert.equal(rows.find((r) => r.type === 'performance').page_title, 'About us');
});

test('another origin: the POSTs are answered 403 without CORS, and nothing is stored', { timeout: 60_000 }, async () => {
  const { context, page, responses } = await newPage();
  await page.goto(`${origin(UNKNOWN_DOMAIN)}/elsewhere`);
  await sent(page, 'pageview', 1);
  await page.evaluate(() => window.rivulet.event('from elsewhere'));
  await page.click('#broken');
  await answer(responses, 'the pageview', (e) => e.type === 'pageview');
  await answer(responses, 'the custom event', (e) => e.event_name === 'from elsewhere');
  await answer(responses, 'the error', (e) => e.type === 'error');
  assert.deepEqual(responses.map((r) => r.status), [403, 403, 403]);
  // The page's own simple fetch: the answer carries no CORS headers, so the browser hides it.
  const own = await page.evaluate(
    ({ url, body }) =>
      fetch(url, { method: 'POST', body }).then(
        (r) => `read ${r.status}`,
        (e) => e.name,
      ),
    { url: `${ingestOrigin()}/api/track`, body: JSON.stringify({ site_id: String(siteId), pathname: '/elsewhere-fetch' }) },
  );
  assert.equal(own, 'TypeError');
  await page.close({ runBeforeUnload: true }); // the vitals, refused as well

  // Then an event from the site's own origin, from the same address and agent (so the same
  // Kafka partition, behind anything of this page's that could have got through): once
  // it is stored, nothing of the other origin's is on its way.
  const page2 = await context.newPage();
  await page2.goto(`${origin(SITE_DOMAIN)}/sentinel`);
  await page2.evaluate(() => window.rivulet.event('sentinel'));
  await storedRows('the sentinel', "event_name = 'sentinel'", (r) => r.length === 1);
  await context.close();
  const stray = await rowsWhere(`hostname = ${sql(UNKNOWN_DOMAIN)} OR pathname LIKE '/elsewhere%'`);
  assert.deepEqual(stray, [], 'nothing from the other origin');
});

test('CORS preflights: the exact origin with credentials for the site, nothing for another', { timeout: 60_000 }, async () => {
  const preflight = (host) =>
    request('OPTIONS', `http://127.0.0.1:${ingest.port}/api/track`, {
      headers: {
        origin: origin(host),
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type',
      },
    });
  const unknown = await preflight(UNKNOWN_DOMAIN);
  assert.equal(unknown.status, 403);
  assert.equal(unknown.headers['access-control-allow-origin'], undefined);
  assert.equal(unknown.headers['access-control-allow-credentials'], undefined);
  const allowed = await preflight(SITE_DOMAIN);
  assert.equal(allowed.status, 204);
  assert.equal(allowed.headers['access-control-allow-origin'], origin(SITE_DOMAIN));
  assert.equal(allowed.headers['access-control-allow-credentials'], 'true');
  assert.match(allowed.headers['access-control-allow-methods'], /\bPOST\b/);
  assert.match(allowed.headers['access-control-allow-headers'], /content-type/i);
  assert.match(allowed.headers.vary, /origin/i);

  // The same in the browser: a JSON fetch is preflighted; from the site it goes through and
  // is stored, from the other origin the browser never sends it.
  const { context, page } = await newPage();
  const jsonFetch = (event) =>
    page.evaluate(
      ({ url, body }) =>
        fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then(
          (r) => r.status,
          (e) => e.name,
        ),
      { url: `${ingestOrigin()}/api/track`, body: JSON.stringify({ site_id: String(siteId), ...event }) },
    );
  await page.goto(`${origin(UNKNOWN_DOMAIN)}/elsewhere-json`);
  assert.equal(await jsonFetch({ type: 'custom_event', event_name: 'json from elsewhere' }), 'TypeError');
  await page.goto(`${origin(SITE_DOMAIN)}/json`);
  assert.equal(await jsonFetch({ type: 'custom_event', event_name: 'json', pathname: '/json' }), 200);
  await storedRows('the preflighted event', "event_name = 'json'", (r) => r.length === 1);
  await context.close();
  assert.deepEqual(await rowsWhere("event_name = 'json from elsewhere'"), []);
});

test('sites update: a domain added to the site is accepted within seconds', { timeout: 60_000 }, async (t) => {
  const { context, page, responses } = await newPage();
  const blog = origin(ADDED_DOMAIN);
  await page.goto(`${blog}/before`);
  const refused = await answer(responses, 'the first pageview', (e) => e.pathname === '/before');
  assert.equal(refused.status, 403, 'not one of the site domains yet');

  const updated = await admin('sites', 'update', String(siteId), '--domain', `${SITE_DOMAIN},${ADDED_DOMAIN}`);
  const t0 = Date.now();
  assert.deepEqual(updated.domains, [SITE_DOMAIN, ADDED_DOMAIN]);
  // Ingest rereads its site directory when admin announces the change (the periodic
  // reread is 30 s away): probe until the new origin is accepted.
  let probe;
  for (;;) {
    probe = await postTrack(
      { type: 'custom_event', event_name: 'probe', hostname: ADDED_DOMAIN, pathname: '/probe' },
      { origin: blog },
    );
    if (probe.status !== 403 || Date.now() - t0 > ACCEPTED_WITHIN_MS) break;
    await sleep(50);
  }
  const acceptedAfter = Date.now() - t0;
  assert.equal(probe.status, 200, `still ${probe.status} ${ACCEPTED_WITHIN_MS} ms after sites update: ${probe.body}`);
  assert.equal(probe.headers['access-control-allow-origin'], blog);
  assert.equal(probe.headers['access-control-allow-credentials'], 'true');
  t.diagnostic(`${ADDED_DOMAIN} accepted ${acceptedAfter} ms after rivulet-admin sites update returned`);

  await page.goto(`${blog}/after`);
  const accepted = await answer(responses, 'the pageview after the update', (e) => e.pathname === '/after');
  assert.equal(accepted.status, 200);
  // (The vitals of /before, sent as it was left, are accepted too: after the update.)
  const where = `hostname = ${sql(ADDED_DOMAIN)} AND type = 'pageview'`;
  const rows = await storedRows('the pageview from the new domain', where, (r) => r.length >= 1);
  await context.close();
  assert.deepEqual(rows.map((r) => r.pathname), ['/after']);
});
