// Web vitals: one performance event, when the page is first hidden.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeObserver, fakeBrowser } from './fake.js';

const ALL_TYPES = ['largest-contentful-paint', 'layout-shift', 'event', 'paint', 'navigation', 'first-input'];
const TIMELINE = {
  navigation: [{ responseStart: 123.4 }],
  paint: [
    { name: 'first-paint', startTime: 200 },
    { name: 'first-contentful-paint', startTime: 250.6 },
  ],
};
const lcp = (startTime: number) => ({ entryType: 'largest-contentful-paint', startTime });
const shift = (startTime: number, value: number, hadRecentInput = false) => ({
  entryType: 'layout-shift',
  startTime,
  value,
  hadRecentInput,
});
const event = (interactionId: number, duration: number) => ({ entryType: 'event', startTime: 1, interactionId, duration });

const performanceEvents = (page: ReturnType<typeof fakeBrowser>) => page.events().filter((e) => e.type == 'performance');

test('one performance event on the first visibilitychange to hidden, with the five vitals', () => {
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE });
  page.start();
  const [observer] = FakeObserver.all;
  assert.deepEqual(observer!.types, ['largest-contentful-paint', 'layout-shift', 'event']);
  assert.ok(observer!.options.every((o) => (o as { buffered: boolean }).buffered));
  observer!.deliver([lcp(900), lcp(1480.4), shift(100, 0.05), event(7, 48), event(0, 500), event(8, 120)]);
  assert.equal(performanceEvents(page).length, 0, 'nothing before the page is hidden');
  page.hide();
  page.hide();
  page.fireWindow('pagehide');
  const sent = performanceEvents(page);
  assert.equal(sent.length, 1, 'once per page');
  const [perf] = sent;
  assert.equal(perf!.lcp, 1480.4, 'the last candidate, in milliseconds as the browser gives them');
  assert.equal(perf!.cls, 0.05);
  assert.equal(perf!.inp, 120, 'the slowest interaction; events without interactionId are not interactions');
  assert.equal(perf!.fcp, 250.6);
  assert.equal(perf!.ttfb, 123.4);
  assert.equal(perf!.pathname, '/products/1');
  assert.ok(!('properties' in perf!) && !('event_name' in perf!));
});

test('pagehide alone sends it too (browsers that skip visibilitychange)', () => {
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE });
  page.start();
  page.fireWindow('pagehide');
  page.hide();
  assert.equal(performanceEvents(page).length, 1);
});

test('entries the observer had not delivered yet are taken when the page hides', () => {
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE });
  page.start();
  FakeObserver.all[0]!.pending = [lcp(2000), event(3, 300)];
  page.hide();
  const [perf] = performanceEvents(page);
  assert.equal(perf!.lcp, 2000);
  assert.equal(perf!.inp, 300);
});

test('CLS: the worst burst of shifts (gaps under 1 s, bursts up to 5 s), shifts after input left out', () => {
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE });
  page.start();
  FakeObserver.all[0]!.deliver([
    // burst 1: 0.1 + 0.1 + 0.1 (gaps of 900 ms)
    shift(1000, 0.1),
    shift(1900, 0.1),
    shift(2800, 0.1),
    // a gap of 1.2 s: burst 2, 0.2 + 0.15 ...
    shift(4000, 0.2),
    shift(4500, 0.15),
    shift(4600, 0.5, true), // after an input: not counted
    // ... that would run past 5 s: 9100 starts burst 3
    shift(4900, 0.01),
    shift(5800, 0.01),
    shift(6700, 0.01),
    shift(7600, 0.01),
    shift(8500, 0.01),
    shift(9100, 0.05),
  ]);
  page.hide();
  const cls = performanceEvents(page)[0]!.cls as number;
  assert.ok(Math.abs(cls - 0.4) < 1e-9, `${cls}: burst 2 (0.2 + 0.15 + 5 × 0.01) is the worst`);
});

test('no layout shift on a browser that observes them: CLS is 0, not unknown', () => {
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE });
  page.start();
  page.hide();
  const [perf] = performanceEvents(page);
  assert.equal(perf!.cls, 0);
  assert.equal(perf!.inp, null, 'no interaction: INP unknown');
  assert.equal(perf!.lcp, null);
});

test('a browser without those entry types: null for what it cannot measure', () => {
  const page = fakeBrowser({ observable: ['paint', 'navigation'], timeline: TIMELINE });
  page.start();
  assert.deepEqual(FakeObserver.all[0]!.types, []);
  page.hide();
  const [perf] = performanceEvents(page);
  assert.deepEqual([perf!.lcp, perf!.cls, perf!.inp, perf!.fcp, perf!.ttfb], [null, null, null, 250.6, 123.4]);
});

test('no PerformanceObserver at all: still no crash, the timeline values only', () => {
  const page = fakeBrowser({ timeline: {} });
  page.start();
  page.hide();
  const [perf] = performanceEvents(page);
  assert.deepEqual([perf!.lcp, perf!.cls, perf!.inp, perf!.fcp, perf!.ttfb], [null, null, null, null, null]);
});

test('the performance event describes the page as loaded, even after SPA navigations', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE });
  page.start();
  page.push('/checkout');
  t.mock.timers.tick(300);
  page.hide();
  assert.equal(performanceEvents(page)[0]!.pathname, '/products/1');
});

test('data-web-vitals="false": no observer, nothing on hide', () => {
  const page = fakeBrowser({ observable: ALL_TYPES, timeline: TIMELINE, attrs: { 'web-vitals': 'false' } });
  page.start();
  page.hide();
  page.fireWindow('pagehide');
  assert.equal(FakeObserver.all.length, 0);
  assert.equal(performanceEvents(page).length, 0);
});
