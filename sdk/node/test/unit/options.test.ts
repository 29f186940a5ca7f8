import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { inspect } from 'node:util';
import Tracker, { Tracker as NamedTracker, TrackerError } from 'rivulet-node';
import { API_KEY } from '../helpers/server.js';

const valid = { analyticsHost: 'http://127.0.0.1:3000/api', siteId: '1', apiKey: API_KEY };

/** Asserts that the constructor throws a TrackerError whose message names the option. */
function rejects(options: unknown, option: string, pattern?: RegExp): void {
  assert.throws(
    () => new Tracker(options as never),
    (err: unknown) => {
      assert.ok(err instanceof TrackerError, `expected a TrackerError, got ${String(err)}`);
      assert.equal(err.code, 'invalid_options');
      assert.match(err.message, new RegExp(`"${option}"`));
      if (pattern) assert.match(err.message, pattern);
      assert.ok(!err.message.includes(API_KEY), 'the API key must not appear in an error message');
      return true;
    },
  );
}

describe('constructor options', () => {
  test('accepts the documented example and exports the class as default and named', () => {
    assert.equal(Tracker, NamedTracker);
    const t = new Tracker(valid);
    assert.ok(t instanceof NamedTracker);
    new Tracker({ ...valid, siteId: 42, debug: true });
    new Tracker({ ...valid, analyticsHost: 'https://rivulet.example.com/api/' });
  });

  test('no options object at all', () => {
    assert.throws(() => new (Tracker as any)(), /needs an options object with analyticsHost, siteId and apiKey/);
    assert.throws(() => new Tracker('http://x' as never), TrackerError);
  });

  test('analyticsHost missing, empty, wrong type or not a URL', () => {
    rejects({ ...valid, analyticsHost: undefined }, 'analyticsHost', /is required/);
    rejects({ ...valid, analyticsHost: '' }, 'analyticsHost', /is required/);
    rejects({ ...valid, analyticsHost: 42 }, 'analyticsHost', /must be a string/);
    rejects({ ...valid, analyticsHost: 'localhost:3000/api' }, 'analyticsHost', /http/);
    rejects({ ...valid, analyticsHost: 'not a url' }, 'analyticsHost', /absolute http\(s\) URL/);
    rejects({ ...valid, analyticsHost: 'ftp://example.com/api' }, 'analyticsHost', /http or https/);
    rejects({ ...valid, analyticsHost: 'http://example.com/api?x=1' }, 'analyticsHost', /query string/);
  });

  test('siteId missing, empty, wrong type or not a positive integer', () => {
    rejects({ ...valid, siteId: undefined }, 'siteId', /is required/);
    rejects({ ...valid, siteId: '' }, 'siteId', /is required/);
    rejects({ ...valid, siteId: true }, 'siteId', /string or a number/);
    rejects({ ...valid, siteId: {} }, 'siteId', /string or a number/);
    rejects({ ...valid, siteId: 0 }, 'siteId', /positive integer/);
    rejects({ ...valid, siteId: -3 }, 'siteId', /positive integer/);
    rejects({ ...valid, siteId: 1.5 }, 'siteId', /positive integer/);
    rejects({ ...valid, siteId: 'abc' }, 'siteId', /positive integer/);
    rejects({ ...valid, siteId: ' 1' }, 'siteId', /positive integer/);
    rejects({ ...valid, siteId: '0' }, 'siteId', /positive integer/);
    rejects({ ...valid, siteId: '4294967296' }, 'siteId', /up to 4294967295/);
    rejects({ ...valid, siteId: Number.NaN }, 'siteId', /positive integer/);
    new Tracker({ ...valid, siteId: '4294967295' });
    new Tracker({ ...valid, siteId: '007' });
  });

  test('apiKey missing, empty, wrong type or without the rb_ prefix', () => {
    rejects({ ...valid, apiKey: undefined }, 'apiKey', /is required/);
    rejects({ ...valid, apiKey: '' }, 'apiKey', /is required/);
    rejects({ ...valid, apiKey: 123 }, 'apiKey', /must be a string/);
    rejects({ ...valid, apiKey: 'sk_0123456789abcdef0123456789abcdef' }, 'apiKey', /must start with "rb_"/);
    rejects({ ...valid, apiKey: 'rb_' }, 'apiKey', /must start with "rb_"/);
  });

  test('reliability and batch options are checked too', () => {
    rejects({ ...valid, debug: 'yes' }, 'debug', /boolean/);
    rejects({ ...valid, timeoutMs: 0 }, 'timeoutMs');
    rejects({ ...valid, timeoutMs: Infinity }, 'timeoutMs');
    rejects({ ...valid, maxRetries: -1 }, 'maxRetries');
    rejects({ ...valid, maxRetries: 1.5 }, 'maxRetries', /integer/);
    rejects({ ...valid, retryBaseDelayMs: 'fast' }, 'retryBaseDelayMs');
    rejects({ ...valid, onError: 'console' }, 'onError', /function/);
    rejects({ ...valid, onDrop: 1 }, 'onDrop', /function/);
    rejects({ ...valid, throwOnError: 1 }, 'throwOnError', /boolean/);
    rejects({ ...valid, batch: 'yes' }, 'batch');
    rejects({ ...valid, batch: { flushAt: 0 } }, 'flushAt');
    rejects({ ...valid, batch: { maxQueueSize: 2.5 } }, 'maxQueueSize');
    rejects({ ...valid, batch: { flushInterval: -1 } }, 'flushInterval');
    rejects({ ...valid, compress: 'gzip' }, 'compress');
    rejects({ ...valid, compress: { minBytes: -1 } }, 'minBytes');
    rejects({ ...valid, fetch: {} }, 'fetch', /function/);
    rejects({ ...valid, disabled: 1 }, 'disabled', /boolean/);
    // Valid combinations build a tracker whose settings show in its summary.
    const t = new Tracker({ ...valid, batch: true, compress: false, disabled: false });
    assert.deepEqual(t.toJSON().batch, { flushAt: 100, flushInterval: 1000, maxQueueSize: 10_000 });
    const u = new Tracker({ ...valid, batch: { flushAt: 10, flushInterval: 50, maxQueueSize: 100 }, maxRetries: 0, compress: { minBytes: 0 } });
    assert.deepEqual(u.toJSON().batch, { flushAt: 10, flushInterval: 50, maxQueueSize: 100 });
    assert.equal(new Tracker(valid).toJSON().batch, false);
  });
});

describe('the API key stays secret', () => {
  test('util.inspect and JSON.stringify of a tracker never show it', () => {
    for (const t of [new Tracker(valid), new Tracker({ ...valid, batch: true, debug: true })]) {
      const shown = [
        inspect(t),
        inspect(t, { showHidden: true, depth: Infinity, customInspect: false }),
        JSON.stringify(t),
        JSON.stringify(Object.entries(t)),
        String(Object.getOwnPropertyNames(t).map((k) => (t as never)[k])),
      ];
      for (const text of shown) assert.ok(!text.includes(API_KEY.slice(3)), `key shown in: ${text.slice(0, 300)}`);
      assert.match(inspect(t), /rb_\[REDACTED\]/);
      assert.deepEqual(JSON.parse(JSON.stringify(t)).apiKey, 'rb_[REDACTED]');
      assert.equal(JSON.parse(JSON.stringify(t)).analyticsHost, valid.analyticsHost);
      void t.shutdown(0);
    }
  });
});
