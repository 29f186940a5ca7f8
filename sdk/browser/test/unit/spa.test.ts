// Single-page apps: a pageview once per real change of page, after the navigation settles.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { fakeBrowser, type FakeBrowser } from './fake.js';

/** Waits out the 300 ms the script lets a navigation settle. */
const settle = (t: TestContext) => t.mock.timers.tick(300);

function startSpa(t: TestContext, options: Parameters<typeof fakeBrowser>[0] = {}): FakeBrowser {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const page = fakeBrowser({ url: 'https://shop.example/', ...options });
  page.start();
  return page;
}

const paths = (page: FakeBrowser) =>
  page.events().filter((e) => e.type == 'pageview').map((e) => (e.pathname as string) + (e.querystring ?? ''));

test('pushState to a new path: one pageview, after the navigation settles', (t) => {
  const page = startSpa(t);
  page.push('/cart');
  t.mock.timers.tick(299);
  assert.deepEqual(paths(page), ['/']);
  t.mock.timers.tick(1);
  assert.deepEqual(paths(page), ['/', '/cart']);
});

test('the same URL twice, a state-only replaceState, a hash anchor: no pageview', (t) => {
  const page = startSpa(t, { url: 'https://shop.example/cart' });
  page.push('/cart');
  settle(t);
  page.replace('/cart');
  settle(t);
  page.hash('#totals');
  settle(t);
  page.window.history.replaceState({ scroll: 10 }, '');
  settle(t);
  assert.deepEqual(paths(page), ['/cart']);
});

test('replaceState that changes the query is a new page; popstate back is one too', (t) => {
  const page = startSpa(t);
  page.push('/search?q=shoes');
  settle(t);
  page.replace('/search?q=boots');
  settle(t);
  page.back('/search?q=shoes');
  settle(t);
  page.back('/');
  settle(t);
  assert.deepEqual(paths(page), ['/', '/search?q=shoes', '/search?q=boots', '/search?q=shoes', '/']);
});

test('a burst of changes (a redirect) counts once, for the URL it ends on', (t) => {
  const page = startSpa(t);
  page.push('/login');
  page.replace('/account');
  settle(t);
  assert.deepEqual(paths(page), ['/', '/account']);
});

test('there and back again within the burst: no pageview', (t) => {
  const page = startSpa(t);
  page.push('/a');
  page.back('/');
  settle(t);
  assert.deepEqual(paths(page), ['/']);
});

test('hash routes: each route is a page; popstate and hashchange for one change count once', (t) => {
  const page = startSpa(t, { url: 'https://shop.example/#/home' });
  page.hash('#/products/5?tab=reviews');
  settle(t);
  page.hash('#/products/5?tab=reviews');
  settle(t);
  assert.deepEqual(paths(page), ['/home', '/products/5?tab=reviews']);
});

test('the pageview carries the title the router set after the URL', (t) => {
  const page = startSpa(t);
  page.push('/cart');
  page.document.title = 'Your cart';
  settle(t);
  assert.equal(page.events().at(-1)!.page_title, 'Your cart');
});

test('a manual pageview counts its URL: a later pushState to it sends nothing', (t) => {
  const page = startSpa(t, { attrs: { 'auto-track-pageview': 'false' } });
  page.push('/cart');
  settle(t);
  assert.deepEqual(paths(page), ['/cart'], 'SPA navigations count without the first pageview');
  page.window.rivulet!.pageview();
  page.push('/cart');
  settle(t);
  assert.deepEqual(paths(page), ['/cart', '/cart']);
});

test('data-track-spa="false": history is left alone, no navigation pageview', (t) => {
  const page = fakeBrowser({ attrs: { 'track-spa': 'false' } });
  const pushState = page.window.history.pushState;
  t.mock.timers.enable({ apis: ['setTimeout'] });
  page.start();
  assert.equal(page.window.history.pushState, pushState);
  assert.equal(page.listeners.window.count('popstate'), 0);
  page.back('/elsewhere');
  settle(t);
  assert.equal(page.events().length, 1);
});

test('the patched pushState still changes the URL', (t) => {
  const page = startSpa(t);
  page.push('/moved');
  assert.equal(page.window.location.pathname, '/moved');
});

test('a pushState the browser refuses throws to its caller as before, and counts nothing', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const page = fakeBrowser();
  page.window.history.pushState = () => {
    throw new DOMException('cannot be created in a document with origin', 'SecurityError');
  };
  page.start();
  assert.throws(() => page.push('https://evil.example/'), /cannot be created/);
  settle(t);
  assert.equal(page.events().length, 1);
});
