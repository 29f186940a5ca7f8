// Runs on Node, Bun and Deno against a real ingest (scripts/test-runtimes.mjs starts it once
// per runtime, from a project that installed the packed tarball). Plain JavaScript: no
// build step on any runtime. Prints one JSON line with what it did; exits 1 on a failure.
//   argv: <marker> <entry: "package" | "web" | "exit">
//   env:  RIVULET_INGEST_URL, RIVULET_SITE_ID, RIVULET_API_KEY
import { createRequire } from 'node:module';

const [marker, entry] = globalThis.Deno ? globalThis.Deno.args : process.argv.slice(2);
const env = (name) => (globalThis.Deno ? globalThis.Deno.env.get(name) : process.env[name]);
const analyticsHost = `${env('RIVULET_INGEST_URL').replace(/\/+$/, '')}/api`;
const options = { analyticsHost, siteId: env('RIVULET_SITE_ID'), apiKey: env('RIVULET_API_KEY') };
const BATCH = 200;

// "web": the entry for runtimes without the "node" condition, loaded by path.
const mod = entry === 'web' ? await import('./node_modules/rivulet-node/dist/esm/index.js') : await import('rivulet-node');
const { Tracker, TrackerError, isTrackerError, VERSION } = mod;
const failures = [];
const check = (ok, what) => {
  if (!ok) failures.push(what);
};

if (entry === 'exit') {
  // Queue and return: beforeExit must send the events before the process ends by itself.
  const t = new Tracker({ ...options, batch: { flushInterval: 3_600_000 } });
  for (let i = 0; i < 5; i++) t.event('runtime_exit', { user_id: marker, pathname: `/exit/${i}` });
} else {
  let tracker;
  try {
    tracker = new Tracker({ ...options, throwOnError: true });
  } catch (e) {
    // Node 18 has no global Web Crypto: the web entry must say so clearly.
    console.log(JSON.stringify({ entry, constructorError: String(e.message), isTrackerError: e instanceof TrackerError }));
  }
  if (tracker !== undefined) await run(tracker);
}

async function run(tracker) {
  await tracker.pageview({ user_id: marker, pathname: '/single', user_agent: 'Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0' });

  const errors = [];
  const drops = [];
  let gzipped = 0;
  const countingFetch = (url, init) => {
    if (init.headers['content-encoding'] === 'gzip') gzipped++;
    return fetch(url, init);
  };
  const batch = new Tracker({
    ...options,
    fetch: countingFetch,
    batch: { flushAt: 50 },
    compress: { minBytes: 512 },
    onError: (e) => errors.push(e.message),
    onDrop: (_e, r) => drops.push(r),
  });
  for (let i = 0; i < BATCH; i++) batch.event('runtime_batch', { user_id: marker, pathname: `/batch/${i}` }, { i });
  const flushed = await batch.flush(60_000);
  await batch.shutdown();
  check(flushed === true, 'flush() resolved true');
  check(errors.length === 0, `no errors: ${errors.join('; ')}`);
  check(drops.length === 0, `no drops: ${drops.join(', ')}`);
  check(batch.stats().delivered === BATCH, `delivered ${batch.stats().delivered}`);
  check(gzipped > 0, 'batches went gzipped');

  // Invalid input and the error class.
  let invalid;
  try {
    await tracker.pageview({ timestamp: 'yesterday' });
  } catch (e) {
    invalid = e;
  }
  check(invalid instanceof TrackerError && isTrackerError(invalid) && invalid.code === 'invalid_event', 'invalid timestamp rejected');
  if (entry === 'package') {
    const require = createRequire(import.meta.url);
    const cjs = require('rivulet-node');
    check(invalid instanceof cjs.TrackerError, 'an ESM error is a CommonJS TrackerError');
    check(cjs.VERSION === VERSION, 'same version from require()');
  }
  console.log(JSON.stringify({ entry, version: VERSION, delivered: batch.stats().delivered + 1, gzipped, failures }));
  if (failures.length > 0) {
    if (globalThis.Deno) globalThis.Deno.exit(1);
    else process.exit(1);
  }
}
