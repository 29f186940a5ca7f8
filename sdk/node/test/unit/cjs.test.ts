import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import * as esm from 'rivulet-node';

const require = createRequire(import.meta.url);

test('the CommonJS build loads with require() and has the same API', () => {
  const cjs = require('rivulet-node') as typeof esm;
  assert.equal(typeof cjs.Tracker, 'function');
  assert.equal(cjs.default, cjs.Tracker);
  assert.equal(typeof cjs.TrackerError, 'function');
  assert.match(require.resolve('rivulet-node'), /dist[\\/]cjs[\\/]index\.js$/);
  assert.throws(() => new cjs.Tracker({ analyticsHost: '', siteId: 1, apiKey: 'rb_x' }), /"analyticsHost"/);
  const t = new cjs.Tracker({ analyticsHost: 'http://127.0.0.1:1/api', siteId: 1, apiKey: 'rb_x' });
  assert.equal(typeof t.pageview, 'function');
});

test('the ESM build has a default and a named export', () => {
  assert.equal(esm.default, esm.Tracker);
});
