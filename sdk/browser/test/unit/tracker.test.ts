// The tracker on a fake page: configuration, the pageview's payload, window.rivulet,
// delivery (sendBeacon, then fetch) and the opt-out flag.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fakeBrowser } from './fake.js';

const COMMON_KEYS = [
  'hostname',
  'language',
  'page_title',
  'pathname',
  'querystring',
  'referrer',
  'screenHeight',
  'screenWidth',
  'sent_at',
  'site_id',
  'type',
];

test('a pageview on load, with every common field and nothing else', () => {
  const page = fakeBrowser({ url: 'https://shop.example/products/1?color=red#reviews' });
  const before = Date.now();
  page.start();
  assert.equal(page.sent.length, 1);
  const [sent] = page.sent;
  assert.equal(sent!.url, 'https://rivulet.example/api/track', 'the same origin and folder as the script');
  // sent_at: the browser's clock when it sent the event, epoch ms (ingest measures its skew).
  const { sent_at, ...fields } = sent!.body;
  assert.ok(typeof sent_at == 'number' && sent_at >= before && sent_at <= Date.now(), `sent_at ${sent_at}`);
  assert.deepEqual(fields, {
    site_id: '1',
    type: 'pageview',
    hostname: 'shop.example',
    pathname: '/products/1',
    querystring: '?color=red',
    page_title: 'Red shoes',
    referrer: 'https://search.example/?q=shoes',
    language: 'en-GB',
    screenWidth: 1440,
    screenHeight: 900,
  });
  assert.deepEqual(Object.keys(sent!.body).sort(), COMMON_KEYS);
  for (const key of ['api_key', 'ip_address', 'user_agent', 'user_id']) assert.ok(!(key in sent!.body), key);
});

test('data-track-query="false": no querystring field at all', () => {
  const page = fakeBrowser({ attrs: { 'track-query': 'false' } });
  page.start();
  assert.ok(!('querystring' in page.events()[0]!));
  assert.equal(page.events()[0]!.pathname, '/products/1');
});

test('data-auto-track-pageview="false": no pageview on load; window.rivulet.pageview() sends one', () => {
  const page = fakeBrowser({ attrs: { 'auto-track-pageview': 'false' } });
  const api = page.start()!;
  assert.equal(page.sent.length, 0);
  api.pageview();
  api.pageview();
  assert.deepEqual(
    page.events().map((e) => e.type),
    ['pageview', 'pageview'],
    'an explicit pageview is sent even for the same URL',
  );
});

test('no data-site-id, or no src and no data-api-host: nothing happens', () => {
  const none = fakeBrowser({ attrs: { 'site-id': '' } });
  assert.equal(none.start(), undefined);
  assert.equal(none.window.rivulet, undefined);
  const noSrc = fakeBrowser({ src: '' });
  assert.equal(noSrc.start(), undefined);
  assert.equal(noSrc.sent.length, 0);
});

test('the endpoint: beside the script, or under data-api-host (absolute or relative to the page)', () => {
  const endpoint = (src: string, apiHost?: string) => {
    const page = fakeBrowser({ src, attrs: apiHost ? { 'api-host': apiHost } : {} });
    page.start();
    return page.sent[0]!.url;
  };
  assert.equal(endpoint('https://rivulet.example/api/script.js?v=2'), 'https://rivulet.example/api/track');
  assert.equal(endpoint('https://cdn.example/script.js'), 'https://cdn.example/track');
  assert.equal(endpoint('https://cdn.example/script.js', 'https://stats.example/api'), 'https://stats.example/api/track');
  assert.equal(endpoint('https://cdn.example/script.js', 'https://stats.example/api/'), 'https://stats.example/api/track');
  assert.equal(endpoint('https://cdn.example/script.js', '/proxy/rivulet'), 'https://shop.example/proxy/rivulet/track');
});

test('skip patterns: no event of any type from a skipped path', () => {
  const page = fakeBrowser({ url: 'https://shop.example/admin/users/5', attrs: { 'skip-patterns': '/admin/**' } });
  const api = page.start()!;
  api.event('clicked');
  page.fireWindow('error', { error: new TypeError('x'), message: 'x' });
  assert.equal(page.sent.length, 0);
});

test('mask patterns: the path is replaced by the pattern that matched', () => {
  const page = fakeBrowser({
    url: 'https://shop.example/users/42/settings?tab=2',
    attrs: { 'mask-patterns': '["/orders/**","/users/*/settings"]' },
  });
  page.start()!.event('saved');
  assert.deepEqual(
    page.events().map((e) => [e.type, e.pathname, e.querystring]),
    [
      ['pageview', '/users/*/settings', '?tab=2'],
      ['custom_event', '/users/*/settings', '?tab=2'],
    ],
  );
});

test('long strings are cut to ingest limits rather than lose the event', () => {
  const page = fakeBrowser({
    url: `https://shop.example/${'p'.repeat(3000)}?${'q'.repeat(3000)}`,
    title: 't'.repeat(600),
    referrer: `https://r.example/${'r'.repeat(3000)}`,
  });
  page.start();
  const e = page.events()[0]!;
  assert.equal((e.pathname as string).length, 2048);
  assert.equal((e.querystring as string).length, 2048);
  assert.equal((e.page_title as string).length, 512);
  assert.equal((e.referrer as string).length, 2048);
});

test('window.rivulet.event: a custom_event with its properties as a string of JSON', () => {
  const page = fakeBrowser();
  const api = page.start()!;
  assert.equal(page.window.rivulet, api);
  api.event('signup', { plan: 'pro', seats: 5, trial: false });
  api.event('plain');
  api.event('');
  const [, withProps, plain, ...rest] = page.events();
  assert.equal(rest.length, 0, 'an empty name sends nothing');
  assert.equal(withProps!.type, 'custom_event');
  assert.equal(withProps!.event_name, 'signup');
  assert.equal(withProps!.properties, '{"plan":"pro","seats":5,"trial":false}');
  assert.equal(withProps!.pathname, '/products/1');
  assert.equal(plain!.event_name, 'plain');
  assert.ok(!('properties' in plain!));
});

test('identify: POST /api/identify, then user_id on the later events; clearUserId forgets it', () => {
  const page = fakeBrowser();
  const api = page.start()!;
  api.identify('user-42', { plan: 'pro' });
  api.event('after');
  api.clearUserId();
  api.event('cleared');
  api.identify('');
  const identify = page.sent.filter((s) => s.url.endsWith('/identify'));
  assert.equal(identify.length, 1, 'an empty id is not sent');
  assert.equal(identify[0]!.url, 'https://rivulet.example/api/identify');
  assert.deepEqual(identify[0]!.body, { site_id: '1', user_id: 'user-42', traits: { plan: 'pro' } });
  const [before, after, cleared] = page.events();
  assert.ok(!('user_id' in before!));
  assert.equal(after!.user_id, 'user-42');
  assert.ok(!('user_id' in cleared!));
});

test('identify without traits sends none; a numeric id is sent as a string', () => {
  const page = fakeBrowser();
  const api = page.start()!;
  api.identify('u1');
  assert.deepEqual(page.sent.at(-1)!.body, { site_id: '1', user_id: 'u1' });
  api.identify(42 as unknown as string);
  api.event('x');
  assert.deepEqual(page.sent.at(-2)!.body, { site_id: '1', user_id: '42' });
  assert.equal(page.events().at(-1)!.user_id, '42');
});

test('delivery: sendBeacon with a string body when it queues the request', () => {
  const page = fakeBrowser({ beacon: 'queue' });
  page.start();
  assert.deepEqual(page.sent.map((s) => s.via), ['beacon']);
});

for (const beacon of ['refuse', 'missing', 'throw'] as const) {
  test(`delivery: fetch with keepalive when sendBeacon ${beacon == 'missing' ? 'is missing' : beacon + 's'}`, () => {
    const page = fakeBrowser({ beacon });
    page.start();
    assert.equal(page.sent.length, 1);
    const [sent] = page.sent;
    assert.equal(sent!.via, 'fetch');
    assert.equal(sent!.url, 'https://rivulet.example/api/track');
    assert.equal(sent!.init!.method, 'POST');
    assert.equal(sent!.init!.keepalive, true);
    assert.equal(typeof sent!.init!.body, 'string', 'a string body: text/plain, no preflight');
    assert.equal(sent!.init!.headers, undefined, 'no header that would need a preflight');
    assert.equal(sent!.body.type, 'pageview');
  });
}

test('delivery: a failing fetch does not surface to the page', async () => {
  const page = fakeBrowser({ beacon: 'missing' });
  let rejected = 0;
  page.window.fetch = async () => {
    rejected++;
    throw new TypeError('Failed to fetch');
  };
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  page.start();
  await new Promise((r) => setTimeout(r, 10));
  process.off('unhandledRejection', onUnhandled);
  assert.equal(rejected, 1);
  assert.deepEqual(unhandled, []);
});

test('opt-out: localStorage rivulet-ignore = "true" stops all sending, at once', () => {
  const page = fakeBrowser({ storage: { 'rivulet-ignore': 'true' } });
  const api = page.start()!;
  api.event('x');
  api.identify('u');
  assert.equal(page.sent.length, 0);

  const later = fakeBrowser();
  const laterApi = later.start()!;
  later.setStorage('rivulet-ignore', 'true');
  laterApi.event('after opting out');
  assert.deepEqual(later.events().map((e) => e.type), ['pageview']);
  later.setStorage('rivulet-ignore', 'false');
  laterApi.event('back in');
  assert.deepEqual(later.events().map((e) => e.event_name ?? e.type), ['pageview', 'back in']);
});

test('opt-out: storage that throws (blocked, sandboxed) is no opt-out', () => {
  const page = fakeBrowser({ storage: 'throws' });
  page.start();
  assert.equal(page.sent.length, 1);
});

test('a prerendered page sends its pageview when activated, not before', () => {
  const page = fakeBrowser({ prerendering: true });
  page.start();
  assert.equal(page.sent.length, 0);
  page.document.prerendering = false;
  page.fireDocument('prerenderingchange');
  assert.deepEqual(page.events().map((e) => e.type), ['pageview']);
});
