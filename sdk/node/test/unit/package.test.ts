// The package as npm publishes it: its files, its licence, its metadata, its README links,
// no runtime dependencies without a recorded decision, and a core free of Node modules.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const repoRoot = fileURLToPath(new URL('../../../../../', import.meta.url));
const read = (path: string): string => readFileSync(root + path, 'utf8');
const pkg = JSON.parse(read('package.json')) as Record<string, any>;

/** What `npm pack` would put in the tarball (dist is built by `npm test`'s pretest). */
function packed(): { files: string[]; size: number; unpackedSize: number } {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  const [info] = JSON.parse(out) as { files: { path: string }[]; size: number; unpackedSize: number }[];
  return { files: info!.files.map((f) => f.path).sort(), size: info!.size, unpackedSize: info!.unpackedSize };
}

describe('npm pack', () => {
  test('ships the builds, types, README, LICENSE and package.json, and nothing else', () => {
    const { files, size, unpackedSize } = packed();
    const modules = readdirSync(root + 'src').filter((f) => f.endsWith('.ts')).map((f) => f.slice(0, -3)).sort();
    const expected = [
      'LICENSE',
      'README.md',
      'package.json',
      'dist/cjs/package.json',
      ...['cjs', 'esm'].flatMap((kind) => modules.flatMap((m) => [`dist/${kind}/${m}.d.ts`, `dist/${kind}/${m}.js`])),
    ].sort();
    assert.deepEqual(files, expected);
    // Today 48 kB packed, 255 kB unpacked (identify() and its docs added 6 and 36): fail on a
    // jump (a stray folder, source maps, a bundle), about 20 % above that.
    assert.ok(size < 58_000, `tarball ${size} bytes`);
    assert.ok(unpackedSize < 306_000, `unpacked ${unpackedSize} bytes`);
  });

  test('every entry point in package.json exists in the tarball', () => {
    const { files } = packed();
    const targets: string[] = [pkg.main, pkg.module, pkg.types];
    const walk = (v: unknown): void => {
      if (typeof v === 'string') targets.push(v);
      else if (v && typeof v === 'object') Object.values(v).forEach(walk);
    };
    walk(pkg.exports);
    for (const t of targets) assert.ok(files.includes(t.replace(/^\.\//, '')), `${t} is not in the package`);
  });
});

describe('licence and metadata', () => {
  test('the LICENSE in the package is the repository root LICENSE, the licence package.json and Cargo.toml name', () => {
    assert.equal(read('LICENSE'), readFileSync(repoRoot + 'LICENSE', 'utf8'));
    assert.match(read('LICENSE'), /Apache License\s+Version 2\.0, January 2004/);
    assert.equal(pkg.license, 'Apache-2.0');
    assert.match(readFileSync(repoRoot + 'Cargo.toml', 'utf8'), /^license = "Apache-2\.0"$/m);
  });

  test('repository, homepage and bugs point at one repository', () => {
    const repo = String(pkg.repository?.url ?? '');
    assert.match(repo, /^git\+https:\/\/.+\.git$/);
    assert.equal(pkg.repository.directory, 'sdk/node');
    const base = repo.replace(/^git\+/, '').replace(/\.git$/, '');
    assert.ok(String(pkg.homepage).startsWith(`${base}/`), pkg.homepage);
    assert.equal(pkg.bugs?.url, `${base}/issues`);
  });

  test('README links work on npm: absolute URLs or anchors of its own headings', () => {
    const readme = read('README.md');
    const anchors = new Set(
      [...readme.matchAll(/^#{1,6} (.+)$/gm)].map((m) =>
        m[1]!
          .toLowerCase()
          .replace(/[^\p{L}\p{N} _-]/gu, '')
          .replace(/ /g, '-'),
      ),
    );
    const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
    assert.ok(links.length > 0);
    for (const link of links) {
      if (link.startsWith('#')) assert.ok(anchors.has(link.slice(1)), `no heading for ${link}`);
      else assert.match(link, /^https:\/\//, `relative link ${link} breaks on npm`);
    }
  });
});

describe('dependencies', () => {
  // A runtime dependency ships to every user: each one needs a section in DEPENDENCIES.md
  // saying why it is worth it (size, licence, maintenance). Today there are none.
  test('no runtime dependency without a recorded decision in DEPENDENCIES.md', () => {
    const decisions = read('DEPENDENCIES.md');
    const recorded = new Set([...decisions.matchAll(/^## `([^`]+)`/gm)].map((m) => m[1]!));
    for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies', 'bundleDependencies', 'bundledDependencies']) {
      const names = Array.isArray(pkg[field]) ? (pkg[field] as string[]) : Object.keys(pkg[field] ?? {});
      for (const name of names) assert.ok(recorded.has(name), `${field}.${name} has no section "## \`${name}\`" in sdk/node/DEPENDENCIES.md`);
    }
  });
});

describe('runtime-neutral core', () => {
  // dist/esm/index.js is what runtimes without the "node" condition load (edge, workers).
  test('nothing reachable from dist/esm/index.js imports node:* or uses Node-only globals', () => {
    const seen = new Set<string>();
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      const code = readFileSync(root + 'dist/esm/' + file, 'utf8');
      for (const m of code.matchAll(/(?:import|export)[^'"]*from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g)) {
        const spec = m[1] ?? m[2]!;
        assert.ok(spec.startsWith('./'), `${file} imports ${spec}`);
        visit(spec.slice(2));
      }
      const withoutComments = code.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
      const hit = /\bBuffer\b|\brequire\(|\bsetImmediate\b|(?<![.\w])process\./.exec(withoutComments);
      assert.equal(hit, null, `${file} uses a Node-only global: ${hit?.[0]}`);
    };
    visit('index.js');
    assert.ok(seen.has('tracker.js') && !seen.has('platform-node.js'), [...seen].join(', '));
  });
});
