// npm run bench: prints one JSON line per result.
//  1. event_call_overhead: µs per tracker.event() call in batch mode, flushing paused
//     (a synchronous loop never yields to the sender), then the queue is drained.
//  2. sustained_throughput: events/s delivered in batch mode for RIVULET_BENCH_SECONDS
//     (default 10) into RIVULET_INGEST_URL (+ RIVULET_SITE_ID, RIVULET_API_KEY) when set,
//     else into a fake local server in a child process: a BASELINE, not the real ingest.
// RIVULET_BENCH_CALLS (default 200000) sets the number of calls of benchmark 1.
// client_cpu_us_per_event: CPU µs of this process per delivered event (the SDK's cost plus the
// producer loop's), gzip included.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { availableParallelism } from 'node:os';
import { createInterface } from 'node:readline';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { Tracker } from 'rivulet-node';

const calls = Number(process.env.RIVULET_BENCH_CALLS ?? 200_000);
const seconds = Number(process.env.RIVULET_BENCH_SECONDS ?? 10);
const runId = `bench-${Date.now().toString(36)}`;

function emit(result: Record<string, unknown>): void {
  console.log(JSON.stringify({ ...result, node: process.version, cpus: availableParallelism() }));
}

async function startFakeIngest(): Promise<{ host: string; stop: () => void }> {
  const child = spawn(process.execPath, [new URL('./fake-ingest.js', import.meta.url).pathname], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const [line] = (await once(createInterface({ input: child.stdout! }), 'line')) as [string];
  return { host: `http://127.0.0.1:${line.trim()}/api`, stop: () => child.stdin!.end() };
}

async function callOverhead(host: string): Promise<void> {
  const failures: string[] = [];
  const tracker = new Tracker({
    analyticsHost: host,
    siteId: 1,
    apiKey: 'rb_00000000000000000000000000000000',
    // Sends only on flush(): the timed loops measure the calls alone.
    batch: { flushAt: calls * 2, flushInterval: 60_000, maxQueueSize: calls * 2 },
    onError: (e) => failures.push(e.message),
  });
  const payload = { pathname: '/pricing', hostname: 'example.com', user_id: `${runId}-calls`, language: 'en' };
  const properties = { plan: 'pro', seats: 5 };
  const variants = {
    'event(name, payload, properties)': () => void tracker.event('bench', payload, properties),
    'pageview()': () => void tracker.pageview(),
  };
  for (let i = 0; i < 20_000; i++) variants['event(name, payload, properties)']();
  await tracker.flush();

  for (const [call, fn] of Object.entries(variants)) {
    // (a) 1,000 calls at a time, the queue drained between rounds (untimed): a queue of normal size.
    const round = 1000;
    let ns = 0;
    for (let r = 0; r < calls / round; r++) {
      const start = process.hrtime.bigint();
      for (let i = 0; i < round; i++) fn();
      ns += Number(process.hrtime.bigint() - start);
      await tracker.flush();
    }
    emit({ bench: 'event_call_overhead', call, mode: 'rounds of 1000, drained between', calls, us_per_call: +(ns / 1000 / calls).toFixed(3), errors: failures.length });

    // (b) every call in one loop: the queue grows to `calls` events (more GC work per call).
    const start = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) fn();
    const loopNs = Number(process.hrtime.bigint() - start);
    const drainStart = process.hrtime.bigint();
    await tracker.flush();
    const drainNs = Number(process.hrtime.bigint() - drainStart);
    emit({
      bench: 'event_call_overhead',
      call,
      mode: 'one loop, queue grows to all calls',
      calls,
      us_per_call: +(loopNs / 1000 / calls).toFixed(3),
      drain_us_per_event: +(drainNs / 1000 / calls).toFixed(3),
      errors: failures.length,
    });
  }
  await tracker.shutdown();
}

// RIVULET_BENCH_COMPRESS=0 turns gzip off, to compare.
const compress = process.env.RIVULET_BENCH_COMPRESS !== '0';

async function sustained(target: { host: string; siteId: string | number; apiKey: string; label: string }): Promise<void> {
  let dropped = 0;
  const failures: string[] = [];
  const maxQueueSize = 10_000;
  const tracker = new Tracker({
    analyticsHost: target.host,
    siteId: target.siteId,
    apiKey: target.apiKey,
    batch: { maxQueueSize },
    compress,
    onDrop: () => dropped++,
    onError: (e) => failures.push(e.message),
  });
  const payload = { pathname: '/bench', hostname: 'bench.example.com', user_id: `${runId}-sustained` };
  const start = Date.now();
  const cpuStart = process.cpuUsage();
  const end = start + seconds * 1000;
  let produced = 0;
  while (Date.now() < end) {
    // Produce in bursts and back off when the queue is 80% full: measure delivery, not drops.
    if (tracker.stats().queued > maxQueueSize * 0.8) {
      await new Promise((r) => setTimeout(r, 1));
      continue;
    }
    for (let i = 0; i < 500; i++) void tracker.event('bench', payload, { i: produced++ });
    await yieldToEventLoop();
  }
  await tracker.shutdown(60_000);
  const elapsed = (Date.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuStart);
  const { delivered } = tracker.stats();
  emit({
    bench: 'sustained_throughput',
    target: target.label,
    seconds: +elapsed.toFixed(2),
    produced,
    delivered,
    dropped,
    errors: failures.length,
    first_error: failures[0],
    events_per_s: Math.round(delivered / elapsed),
    // CPU of this process (producer + SDK, zlib's threads included), in % of one core.
    client_cpu_pct: Math.round(((cpu.user + cpu.system) / 1e6 / elapsed) * 100),
    client_cpu_us_per_event: delivered > 0 ? +((cpu.user + cpu.system) / delivered).toFixed(2) : null,
    compress: compress ? 'gzip level 1 over 1024 bytes (default)' : 'off',
  });
}

const fake = await startFakeIngest();
try {
  await callOverhead(fake.host);
  const ingest = process.env.RIVULET_INGEST_URL;
  if (ingest) {
    await sustained({
      host: `${ingest.replace(/\/+$/, '')}/api`,
      siteId: process.env.RIVULET_SITE_ID ?? '1',
      apiKey: process.env.RIVULET_API_KEY ?? '',
      label: `rivulet-ingest at ${ingest}`,
    });
  } else {
    await sustained({
      host: fake.host,
      siteId: 1,
      apiKey: 'rb_00000000000000000000000000000000',
      label: 'BASELINE: fake local node:http server in a child process (not the real ingest; set RIVULET_INGEST_URL)',
    });
  }
} finally {
  fake.stop();
}
