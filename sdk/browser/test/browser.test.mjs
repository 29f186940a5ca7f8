// script.js in a real browser: Debian's chromium driven by playwright-core (which never
// downloads a browser). One local HTTP server plays three hosts, all mapped to 127.0.0.1
// by --host-resolver-rules so that each has a real origin:
//   shop.example     the site: test pages that embed the script as sites do
//   rivulet.example  Rivulet: GET /api/script.js (the BUILT ingest/assets/script.js) and a
//                    recording collector for POST /api/track and /api/identify, answering
//                    like ingest's browser path (CORS for the exact origin, with
//                    credentials; OPTIONS preflights answered, and counted)
//   partner.example  another site, the target of an outbound link
// Needs: /usr/bin/chromium (CHROMIUM_PATH to override; apt-get install -y
// --no-install-recommends chromium fonts-liberation), `npm ci` in sdk/browser.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const SCRIPT = path.join(root, 'ingest/assets/script.js');
const chromiumPath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const HOSTS = ['shop.example', 'rivulet.example', 'partner.example'];

let server;
let port;
let browser;
/** Every request the collector received: { method, path, headers, body }. */
let received = [];
/**
 * The test now running: its pages tag their requests with it (?test=), and the collector
 * records only those. A page closed at the end of a test sends its vitals as it goes,
 * and that request may land during the next test.
 */
let currentTest = 0;

const shopOrigin = () => `http://shop.example:${port}`;
const rivulet = () => `http://rivulet.example:${port}`;

/** A shop page that embeds script.js as the README says, with `attrs` on its tag. */
function shopPage(title, attrs = '') {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${title}</title>
<script src="${rivulet()}/api/script.js" data-site-id="7" ${attrs} defer></script>
</head><body>
<h1>Rivulet test shop</h1>
<p id="intro">Shoes, boots and everything in between. This paragraph is the largest thing the page paints.</p>
<button id="slow">Add to cart (slow)</button>
<button id="broken">Checkout (broken)</button>
<button id="rejecting">Pay (rejects)</button>
<p><a id="out" href="http://partner.example:${port}/landing?from=shop">Visit our partner</a></p>
<script>
  // An interaction that takes 150 ms: what INP measures.
  document.getElementById('slow').addEventListener('click', () => {
    const end = performance.now() + 150;
    while (performance.now() < end);
  });
  // A bug: an uncaught TypeError, thrown by the page's own (same-origin) script.
  document.getElementById('broken').addEventListener('click', () => {
    const cart = null;
    cart.checkout();
  });
  document.getElementById('rejecting').addEventListener('click', () => {
    Promise.reject(new RangeError('card declined'));
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

function cors(req, res) {
  // Like ingest's browser path: the exact origin, with credentials (sendBeacon sends them).
  if (req.headers.origin === shopOrigin()) {
    res.setHeader('Access-Control-Allow-Origin', req.headers.origin);
    res.setHeader('Access-Control-Allow-Credentials', 'true');
    res.setHeader('Vary', 'Origin');
  }
}

function serve(req, res) {
  const host = (req.headers.host || '').split(':')[0];
  const url = new URL(req.url, `http://${req.headers.host}`);
  const send = (status, type, body) => {
    res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store' });
    res.end(body);
  };
  if (host === 'shop.example') {
    if (url.pathname === '/favicon.ico') return send(404, 'text/plain', '');
    const attrs = url.searchParams.get('attrs') || '';
    return send(200, 'text/html; charset=utf-8', shopPage(url.pathname === '/about' ? 'About us' : 'Shop home', attrs));
  }
  if (host === 'partner.example')
    return send(200, 'text/html; charset=utf-8', '<!doctype html><title>Partner</title><h1>Partner</h1>');
  if (host !== 'rivulet.example') return send(404, 'text/plain', 'unknown host');
  if (req.method === 'GET' && url.pathname === '/api/script.js')
    return send(200, 'application/javascript; charset=utf-8', fs.readFileSync(SCRIPT));
  if (url.pathname !== '/api/track' && url.pathname !== '/api/identify') return send(404, 'text/plain', 'not found');
  cors(req, res);
  const record = (r) => url.searchParams.get('test') === String(currentTest) && received.push(r);
  if (req.method === 'OPTIONS') {
    record({ method: 'OPTIONS', path: url.pathname, headers: req.headers });
    res.setHeader('Access-Control-Allow-Methods', 'POST');
    res.setHeader('Access-Control-Allow-Headers', 'Content-Type');
    res.setHeader('Access-Control-Max-Age', '600');
    res.writeHead(204);
    return res.end();
  }
  let raw = '';
  req.setEncoding('utf8');
  req.on('data', (chunk) => (raw += chunk));
  req.on('end', () => {
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      body = { unparsable: raw };
    }
    record({ method: req.method, path: url.pathname, via: url.searchParams.get('via'), headers: req.headers, body });
    send(200, 'application/json', '{"success":true}');
  });
}

before(async () => {
  assert.ok(fs.existsSync(SCRIPT), `${SCRIPT} is missing: run npm run build`);
  assert.ok(
    fs.existsSync(chromiumPath),
    `${chromiumPath} is missing: apt-get install -y --no-install-recommends chromium fonts-liberation ` +
      '(or set CHROMIUM_PATH)',
  );
  server = http.createServer(serve);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = server.address().port;
  // launch() gives the browser a fresh temporary --user-data-dir of its own.
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
      `--host-resolver-rules=${HOSTS.map((h) => `MAP ${h} 127.0.0.1`).join(', ')}`,
    ],
  });
});

after(async () => {
  await browser?.close();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve()));
});

/** The collector's requests from now on, to read after an action. */
function collect() {
  received = [];
  currentTest++;
  return {
    all: () => received,
    posts: () => received.filter((r) => r.method === 'POST'),
    events: () => received.filter((r) => r.method === 'POST' && r.path === '/api/track').map((r) => r.body),
  };
}

async function waitFor(what, predicate, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const found = predicate();
    if (found) return found;
    if (Date.now() > end) {
      const got = JSON.stringify(received.map((r) => r.body ?? r.method));
      throw new Error(`timed out after ${ms} ms waiting for ${what}; received: ${got}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Waits until the page has painted twice: an interaction's Event Timing entry (INP) exists
 * only once the frame after it is presented; a tab closed before that has no INP to give.
 */
const painted = (page) =>
  page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 50)))));

async function newPage() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-GB' });
  // Which call sent each request: sendBeacon and fetch tag their URL with ?via=. Plain http
  // has no Sec-Fetch-Mode header to tell them apart, and a beacon sent while the page
  // unloads is not reported to Playwright's request events. And which test: ?test=.
  await context.addInitScript((test) => {
    const beacon = navigator.sendBeacon.bind(navigator);
    navigator.sendBeacon = (url, data) => beacon(`${url}?via=beacon&test=${test}`, data);
    const fetch = window.fetch.bind(window);
    window.fetch = (url, init) => fetch(`${url}?via=fetch&test=${test}`, init);
  }, currentTest);
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
  page.on('pageerror', () => {}); // the page's own deliberate errors
  return { context, page, consoleErrors };
}

const VISIT = 'a visit: pageview, SPA navigations, custom event, identify, errors, outbound click, vitals on leaving';
test(VISIT, { timeout: 60_000 }, async () => {
  const c = collect();
  const { context, page } = await newPage();
  await page.goto(`${shopOrigin()}/?ref=ad`, { referer: 'https://search.example/?q=boots' });

  const first = await waitFor('the pageview', () => c.events().find((e) => e.type === 'pageview'));
  // sent_at: the browser's clock when it sent the event (epoch ms, this machine's clock).
  assert.ok(Math.abs(first.sent_at - Date.now()) < 60_000, `sent_at ${first.sent_at}`);
  assert.deepEqual(
    { ...first, screenWidth: typeof first.screenWidth, screenHeight: typeof first.screenHeight, sent_at: typeof first.sent_at },
    {
      site_id: '7',
      type: 'pageview',
      hostname: 'shop.example',
      pathname: '/',
      querystring: '?ref=ad',
      page_title: 'Shop home',
      referrer: 'https://search.example/?q=boots',
      language: 'en-GB',
      screenWidth: 'number',
      screenHeight: 'number',
      sent_at: 'number',
    },
  );

  // SPA: pushState to a new page, then back (popstate): one pageview each.
  await page.evaluate(() => {
    history.pushState({}, '', '/cart?step=1');
    document.title = 'Your cart';
  });
  await waitFor('the pushState pageview', () => c.events().filter((e) => e.type === 'pageview').length === 2);
  await page.evaluate(() => history.replaceState({ scrolled: true }, '')); // same URL: nothing
  await page.evaluate(() => history.back());
  await waitFor('the popstate pageview', () => c.events().filter((e) => e.type === 'pageview').length === 3);
  await sleep(500);
  const pageviews = c.events().filter((e) => e.type === 'pageview');
  assert.deepEqual(
    pageviews.map((e) => [e.pathname, e.querystring, e.page_title]),
    [
      ['/', '?ref=ad', 'Shop home'],
      ['/cart', '?step=1', 'Your cart'],
      ['/', '?ref=ad', 'Your cart'],
    ],
  );

  // The API.
  await page.evaluate(() => window.rivulet.event('newsletter', { list: 'weekly', position: 2 }));
  await page.evaluate(() => window.rivulet.identify('user-42', { plan: 'pro' }));
  await page.evaluate(() => window.rivulet.event('after identify'));
  const identify = await waitFor('identify', () => c.posts().find((r) => r.path === '/api/identify'));
  assert.deepEqual(identify.body, { site_id: '7', user_id: 'user-42', traits: { plan: 'pro' } });
  const custom = await waitFor('the custom events', () => {
    const found = c.events().filter((e) => e.type === 'custom_event');
    return found.length === 2 && found;
  });
  const newsletter = custom.find((e) => e.event_name === 'newsletter');
  assert.equal(newsletter.properties, '{"list":"weekly","position":2}');
  assert.ok(!('user_id' in newsletter));
  assert.equal(custom.find((e) => e.event_name === 'after identify').user_id, 'user-42');

  // A slow interaction (INP), an uncaught TypeError, an unhandled rejection.
  await page.click('#slow');
  await page.click('#broken');
  await page.click('#rejecting');
  const errors = await waitFor('two error events', () => {
    const found = c.events().filter((e) => e.type === 'error');
    return found.length === 2 && found;
  });
  const typeError = errors.find((e) => e.event_name === 'TypeError');
  assert.ok(typeError, JSON.stringify(errors));
  const props = JSON.parse(typeError.properties);
  assert.match(props.message, /checkout|null/);
  assert.equal(props.fileName, `${shopOrigin()}/?ref=ad`);
  assert.ok(props.lineNumber > 0 && props.columnNumber > 0, JSON.stringify(props));
  assert.match(props.stack, /TypeError/);
  const rejection = errors.find((e) => e.event_name === 'RangeError');
  assert.equal(JSON.parse(rejection.properties).message, 'card declined');
  assert.equal(typeError.user_id, 'user-42');

  // Leaving through an outbound link: the outbound event, then (pagehide) the vitals.
  await page.click('#out');
  await page.waitForURL(/partner\.example/);
  const outbound = await waitFor('the outbound event', () => c.events().find((e) => e.type === 'outbound'));
  assert.deepEqual(JSON.parse(outbound.properties), {
    url: `http://partner.example:${port}/landing?from=shop`,
    text: 'Visit our partner',
    target: '_self',
  });
  const perf = await waitFor('the performance event', () => c.events().find((e) => e.type === 'performance'));
  await sleep(1000);
  assert.equal(c.events().filter((e) => e.type === 'performance').length, 1, 'web vitals are sent once');
  assert.equal(perf.pathname, '/', 'the page as loaded');
  for (const metric of ['lcp', 'fcp', 'ttfb', 'cls', 'inp'])
    assert.equal(typeof perf[metric], 'number', `${metric}: ${perf[metric]}`);
  assert.ok(perf.lcp > 0 && perf.fcp > 0 && perf.lcp >= perf.fcp, JSON.stringify(perf));
  assert.ok(perf.cls > 0, `the banner shifted the page: cls ${perf.cls}`);
  assert.ok(perf.inp >= 150, `the slow click took 150 ms: inp ${perf.inp}`);

  // What the server sees: simple CORS requests from the site's origin, no preflight.
  const posts = c.posts();
  assert.equal(c.all().filter((r) => r.method === 'OPTIONS').length, 0, 'no preflight');
  for (const r of posts) {
    assert.equal(r.headers.origin, shopOrigin(), r.path);
    assert.equal(r.headers['content-type'], 'text/plain;charset=UTF-8', r.path);
    assert.equal(r.via, 'beacon', `${r.body.type}: sent by sendBeacon`);
    for (const field of ['api_key', 'ip_address', 'user_agent']) assert.ok(!(field in r.body), field);
  }
  await context.close();
});

test('a tab closed: the vitals arrive by sendBeacon during pagehide', { timeout: 30_000 }, async () => {
  const c = collect();
  const { context, page } = await newPage();
  await page.goto(`${shopOrigin()}/about`);
  await waitFor('the pageview', () => c.events().find((e) => e.type === 'pageview'));
  await page.click('#slow');
  await painted(page);
  await page.close({ runBeforeUnload: true });
  const perf = await waitFor('the performance event', () => c.events().find((e) => e.type === 'performance'));
  assert.equal(perf.pathname, '/about');
  assert.equal(perf.page_title, 'About us');
  assert.ok(perf.inp >= 150, `inp ${perf.inp}`);
  const beacon = c.posts().find((r) => r.body.type === 'performance');
  assert.equal(beacon.via, 'beacon', 'sent by sendBeacon');
  await context.close();
});

const FALLBACK = 'sendBeacon refusing: fetch with keepalive takes over, without preflight, CORS letting it read the answer';
test(FALLBACK, { timeout: 30_000 }, async () => {
  const c = collect();
  const { context, page, consoleErrors } = await newPage();
  await context.addInitScript(() => {
    window.__beacons = 0; // runs after newPage's own init script: replaces its sendBeacon
    navigator.sendBeacon = () => {
      window.__beacons++;
      return false; // what a browser answers when its beacon queue is full
    };
  });
  await page.goto(`${shopOrigin()}/`);
  const pageview = await waitFor('the pageview', () => c.posts().find((r) => r.body.type === 'pageview'));
  assert.equal(pageview.via, 'fetch', 'sent by fetch');
  assert.equal(pageview.headers['content-type'], 'text/plain;charset=UTF-8');
  assert.equal(pageview.headers.origin, shopOrigin());
  await page.evaluate(() => window.rivulet.event('by fetch'));
  await waitFor('the custom event', () => c.events().find((e) => e.event_name === 'by fetch'));
  assert.equal(await page.evaluate(() => window.__beacons), 2, 'sendBeacon was tried first each time');
  assert.equal(c.all().filter((r) => r.method === 'OPTIONS').length, 0, 'no preflight');
  await sleep(200);
  assert.deepEqual(consoleErrors.filter((m) => /CORS|Access-Control/i.test(m)), []);
  await context.close();
});

test('data-* switches: no query string, no outbound, skipped and masked paths', { timeout: 30_000 }, async () => {
  const c = collect();
  const { context, page } = await newPage();
  const attrs = encodeURIComponent(
    'data-track-query="false" data-track-outbound="false" data-mask-patterns="/users/*" data-skip-patterns="/admin/**"',
  );
  await page.goto(`${shopOrigin()}/users/42?secret=1&attrs=${attrs}`);
  const pageview = await waitFor('the pageview', () => c.events().find((e) => e.type === 'pageview'));
  assert.equal(pageview.pathname, '/users/*');
  assert.ok(!('querystring' in pageview));
  await page.evaluate(() => history.pushState({}, '', '/admin/settings/keys'));
  await sleep(600);
  await page.evaluate(() => window.rivulet.event('from admin'));
  await page.click('#out');
  await page.waitForURL(/partner\.example/);
  await waitFor('the performance event', () => c.events().find((e) => e.type === 'performance'));
  await sleep(500);
  assert.deepEqual(
    c.events().map((e) => e.type),
    ['pageview', 'performance'],
    'nothing from the skipped path but the vitals of the page as loaded; no outbound event',
  );
  await context.close();
});

test('opt-out: localStorage rivulet-ignore = "true" sends nothing at all', { timeout: 30_000 }, async () => {
  const c = collect();
  const { context, page } = await newPage();
  await context.addInitScript(() => localStorage.setItem('rivulet-ignore', 'true'));
  await page.goto(`${shopOrigin()}/`);
  await page.waitForFunction(() => window.rivulet);
  await page.evaluate(() => window.rivulet.event('ignored'));
  await page.click('#broken');
  await page.click('#out');
  await page.waitForURL(/partner\.example/);
  await sleep(1000);
  assert.deepEqual(c.all(), []);
  await context.close();
});
