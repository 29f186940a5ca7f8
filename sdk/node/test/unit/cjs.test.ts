import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import * as esm from 'rivulet-node';

const require = createRequire(import.meta.url);
const cjs = require('rivulet-node') as typeof esm;

test('the CommonJS build loads with require() and has the same API', () => {
  assert.equal(typeof cjs.Tracker, 'function');
  assert.equal(cjs.default, cjs.Tracker);
  assert.equal(typeof cjs.TrackerError, 'function');
  assert.equal(cjs.VERSION, esm.VERSION);
  assert.match(require.resolve('rivulet-node'), /dist[\\/]cjs[\\/]node\.js$/);
  assert.throws(() => new cjs.Tracker({ analyticsHost: '', siteId: 1, apiKey: 'rb_x' }), /"analyticsHost"/);
  const t = new cjs.Tracker({ analyticsHost: 'http://127.0.0.1:1/api', siteId: 1, apiKey: 'rb_x' });
  assert.equal(typeof t.pageview, 'function');
});

test('the ESM build has a default and a named export', () => {
  assert.equal(esm.default, esm.Tracker);
});

test('one TrackerError identity across the ESM and CommonJS builds', async () => {
  assert.notEqual(cjs.TrackerError, esm.TrackerError, 'two builds, two classes: the dual-package case');
  let fromCjs: unknown;
  try {
    new cjs.Tracker({ analyticsHost: '', siteId: 1, apiKey: 'rb_x' });
  } catch (e) {
    fromCjs = e;
  }
  let fromEsm: unknown;
  try {
    new esm.Tracker({ analyticsHost: '', siteId: 1, apiKey: 'rb_x' });
  } catch (e) {
    fromEsm = e;
  }
  assert.ok(fromCjs instanceof esm.TrackerError, 'a CommonJS error is an ESM TrackerError');
  assert.ok(fromEsm instanceof cjs.TrackerError, 'an ESM error is a CommonJS TrackerError');
  assert.ok(esm.isTrackerError(fromCjs) && cjs.isTrackerError(fromEsm));
  assert.ok(fromCjs instanceof Error);
  // Errors made by the tracker at run time too (a rejected call).
  const t = new cjs.Tracker({ analyticsHost: 'http://127.0.0.1:1/api', siteId: 1, apiKey: 'rb_x', throwOnError: true });
  await assert.rejects(t.pageview({ pathname: 5 as never }), (e: unknown) => e instanceof esm.TrackerError);
  // Anything else is not one.
  assert.equal(new Error('x') instanceof esm.TrackerError, false);
  assert.equal(esm.isTrackerError({ code: 'http' }), false);
  assert.equal(esm.isTrackerError(null), false);
  // A subclass keeps ordinary instanceof semantics.
  class Mine extends esm.TrackerError {}
  assert.equal(fromEsm instanceof Mine, false);
  assert.ok(new Mine('m', { code: 'http' }) instanceof Mine);
});
