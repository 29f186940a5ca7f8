// Judges the supply chain against supply-chain.json; scripts/audit gathers the inputs:
//   - cargo-audit's JSON report for each Cargo lock file (run offline on a RustSec snapshot),
//   - `cargo metadata` for each Cargo workspace (every crate's own `license` field),
//   - npm package-lock.json files, and the packages installed beside them,
//   - the product's own licence as Cargo.toml, sdk/node/package.json and LICENSE state it.
// Prints every finding; exits 1 when anything is not covered by the policy.
//
//   node scripts/supply-chain/check.mjs --root DIR --policy FILE \
//     --audit LABEL=REPORT.json ... --metadata LABEL=METADATA.json ... --npm LABEL=DIR ...
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { allows, parse } from './spdx.mjs';

const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** Checks the policy file itself; returns a list of problems. */
export function validatePolicy(policy) {
  const problems = [];
  if (typeof policy?.product?.licence !== 'string') problems.push('product.licence is missing');
  const accepted = policy?.advisories?.accepted_warnings;
  if (!Array.isArray(accepted)) problems.push('advisories.accepted_warnings must be a list');
  for (const a of accepted ?? []) {
    if (!/^[A-Z]+-\d{4}-\d{4}$/.test(a.id ?? '')) problems.push(`accepted warning with a bad id: ${JSON.stringify(a.id)}`);
    if (!a.crate) problems.push(`accepted warning ${a.id}: no crate`);
    if (!(typeof a.reason === 'string' && a.reason.trim().length >= 20)) problems.push(`accepted warning ${a.id}: no reason`);
  }
  const yanked = policy?.advisories?.yanked;
  if (typeof yanked?.checked !== 'boolean' || !yanked.reason) problems.push('advisories.yanked needs "checked" and a "reason"');
  const licences = policy?.licences?.accepted;
  if (!Array.isArray(licences) || licences.length === 0) problems.push('licences.accepted must be a non-empty list');
  for (const l of licences ?? []) {
    if (!l.id) problems.push('an accepted licence has no id');
    if (!(typeof l.reason === 'string' && l.reason.trim().length >= 10)) problems.push(`accepted licence ${l.id}: no reason`);
    if (l.only !== undefined && !(Array.isArray(l.only) && l.only.length > 0)) problems.push(`accepted licence ${l.id}: "only" must be a non-empty list`);
  }
  for (const c of policy?.licences?.clarified ?? []) {
    for (const field of ['name', 'stated', 'licence', 'reason']) {
      if (typeof c[field] !== 'string' || c[field].trim() === '') problems.push(`clarified licence of ${c.name}: no ${field}`);
    }
    if ((c.file === undefined) !== (c.sha256 === undefined)) problems.push(`clarified licence of ${c.name}: "file" and "sha256" go together`);
  }
  for (const e of policy?.licences?.embedded ?? []) {
    for (const field of ['crate', 'source', 'data', 'licence', 'reason']) {
      if (typeof e[field] !== 'string' || e[field].trim() === '') problems.push(`embedded data of ${e.crate}: no ${field}`);
    }
  }
  return problems;
}

/**
 * Advisories: `reports` is [{ label, report }] with cargo-audit's JSON report per lock file.
 * Vulnerabilities always fail; each warning must be accepted (by id and crate) in the policy;
 * an acceptance that matches nothing fails too, so the policy lists exactly what is accepted.
 */
export function checkAdvisories(policy, reports) {
  const lines = [];
  const failures = [];
  const accepted = new Map((policy.advisories.accepted_warnings ?? []).map((a) => [a.id, a]));
  const used = new Set();
  for (const { label, report } of reports) {
    const count = report?.database?.['advisory-count'];
    if (!(Number.isInteger(count) && count > 0)) {
      failures.push(`${label}: the advisory database loaded no advisories (advisory-count ${JSON.stringify(count)})`);
      continue;
    }
    // A cargo-audit config (~/.cargo/audit.toml, .cargo/audit.toml) must not narrow the audit:
    // supply-chain.json is the only place where anything is accepted.
    const settings = report?.settings ?? {};
    const narrowed = [];
    if (settings.ignore?.length) narrowed.push(`ignores ${settings.ignore.join(', ')}`);
    if (settings.severity) narrowed.push(`reports only severity ${settings.severity} and above`);
    if (settings.target_arch?.length || settings.target_os?.length) narrowed.push('checks only some platforms');
    const kinds = settings.informational_warnings ?? [];
    const off = ['unmaintained', 'unsound', 'notice'].filter((k) => !kinds.includes(k));
    if (off.length) narrowed.push(`does not report ${off.join(', ')}`);
    if (narrowed.length) failures.push(`${label}: a cargo-audit config ${narrowed.join('; ')}: remove it (supply-chain.json is the policy)`);
    const crates = report?.lockfile?.['dependency-count'];
    const vulns = report?.vulnerabilities?.list;
    const warningsByKind = report?.warnings;
    if (!Array.isArray(vulns) || typeof warningsByKind !== 'object' || warningsByKind === null) {
      failures.push(`${label}: not a cargo-audit report (no vulnerabilities.list / warnings)`);
      continue;
    }
    const warnings = Object.entries(warningsByKind).flatMap(([kind, list]) => (list ?? []).map((w) => ({ kind, ...w })));
    lines.push(`${label}: ${crates} crates checked against ${count} advisories: ${plural(vulns.length, 'vulnerability', 'vulnerabilities')}, ${plural(warnings.length, 'warning')}`);
    for (const v of vulns) {
      const msg = `VULNERABILITY ${v.advisory?.id} in ${v.package?.name} ${v.package?.version}: ${v.advisory?.title}` +
        (v.versions?.patched?.length ? ` (patched: ${v.versions.patched.join(', ')})` : ' (no patched version)');
      lines.push(`  ${msg}`);
      failures.push(`${label}: ${msg}` + (accepted.has(v.advisory?.id) ? '; vulnerabilities cannot be accepted in the policy' : ''));
    }
    for (const w of warnings) {
      const id = w.advisory?.id;
      const what = `${w.kind} ${id ?? '(no advisory)'} ${w.package?.name} ${w.package?.version}` + (w.advisory?.title ? ` (${w.advisory.title})` : '');
      const a = id && accepted.get(id);
      if (a && a.crate === w.package?.name) {
        lines.push(`  warning ${what}`);
        lines.push(used.has(id) ? '    accepted by supply-chain.json (reason above)' : `    accepted by supply-chain.json: ${a.reason}`);
        used.add(id);
      } else {
        lines.push(`  warning ${what}`);
        lines.push('    NOT ACCEPTED: fix it, or accept it with a reason in supply-chain.json');
        failures.push(`${label}: warning ${what} is not accepted in the policy`);
      }
    }
  }
  for (const id of accepted.keys()) {
    if (!used.has(id)) failures.push(`supply-chain.json accepts ${id}, but no lock file has it any more: remove the entry`);
  }
  const yanked = policy.advisories.yanked;
  lines.push(yanked.checked ? 'yanked crates: checked' : `yanked crates: not checked offline (supply-chain.json: ${yanked.reason})`);
  return { lines, failures };
}

function acceptedFor(policy, source) {
  return new Set(policy.licences.accepted.filter((l) => !l.only || l.only.includes(source)).map((l) => l.id));
}

/**
 * A package whose metadata is not an SPDX expression (e.g. npm's "SEE LICENSE IN <file>")
 * counts only through a clarification in the policy for that package and that exact text;
 * with `file` and `sha256`, the installed licence file must still be the one that was read.
 */
function clarify(policy, d) {
  const c = (policy.licences.clarified ?? []).find((c) => c.name === d.name && c.stated === d.licence);
  if (!c) return { licence: d.licence };
  if (c.file && d.dir) {
    const file = join(d.dir, c.file);
    if (!existsSync(file)) return { error: `its licence file ${c.file} is missing, so the clarification in supply-chain.json cannot be checked` };
    const sha256 = createHash('sha256').update(readFileSync(file)).digest('hex');
    if (sha256 !== c.sha256) return { error: `its licence file ${c.file} changed (sha256 ${sha256}); read it again and update the clarification in supply-chain.json` };
  }
  return { licence: c.licence, clarified: true };
}

function judge(policy, source, deps) {
  // deps: [{ name, version, licence, from, dir? }]
  const lines = [];
  const failures = [];
  const accepted = acceptedFor(policy, source);
  const byLicence = new Map();
  for (const dep of deps) {
    const c = clarify(policy, dep);
    if (c.error) {
      failures.push(`${source}: ${dep.name} ${dep.version}: ${c.error}`);
      continue;
    }
    const d = { ...dep, licence: c.licence };
    if (c.clarified) lines.push(`  ${d.name} ${d.version} states ${JSON.stringify(dep.licence)}: read as ${d.licence} (clarified in supply-chain.json)`);
    if (typeof d.licence !== 'string' || d.licence.trim() === '') {
      failures.push(`${source}: ${d.name} ${d.version} states no licence${d.from ? ` (${d.from})` : ''}`);
      continue;
    }
    let ok;
    try {
      ok = allows(accepted, parse(d.licence));
    } catch (e) {
      failures.push(`${source}: ${d.name} ${d.version}: cannot read its licence ${JSON.stringify(d.licence)}: ${e.message}`);
      continue;
    }
    if (!ok) failures.push(`${source}: ${d.name} ${d.version} is licensed ${JSON.stringify(d.licence)}, which supply-chain.json does not accept here`);
    byLicence.set(d.licence, (byLicence.get(d.licence) ?? 0) + 1);
  }
  const summary = [...byLicence.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([l, n]) => `${n} ${l}`).join('; ');
  lines.unshift(`${source}: ${plural(deps.length, 'dependency', 'dependencies')}${failures.length ? `, ${failures.length} not accepted` : ', every licence accepted'}`);
  if (summary) lines.splice(1, 0, `  ${summary}`);
  return { lines, failures };
}

/** Rust: `cargo metadata` output; crates from a registry or git are dependencies, path crates are Rivulet's own. */
export function checkCargoLicences(policy, source, metadata) {
  const product = policy.product.licence;
  const failures = [];
  const deps = [];
  for (const p of metadata.packages ?? []) {
    if (p.source == null) {
      if (p.license !== product) failures.push(`${source}: Rivulet's own crate ${p.name} is licensed ${JSON.stringify(p.license)}, not ${product}`);
    } else {
      deps.push({ name: p.name, version: p.version, licence: p.license, from: p.license_file ? `licence file only: ${p.license_file}` : '' });
    }
  }
  if (deps.length === 0) failures.push(`${source}: cargo metadata lists no dependencies`);
  const r = judge(policy, source, deps);
  const embedded = checkEmbedded(policy, source, deps);
  return { lines: [...r.lines, ...embedded.lines], failures: [...failures, ...r.failures, ...embedded.failures] };
}

/**
 * Data a crate compiles in under a licence of its own (its Cargo.toml states the code's):
 * each entry's licence must be accepted for that source, and an entry whose crate is no
 * longer a dependency fails, so the list stays exact.
 */
function checkEmbedded(policy, source, deps) {
  const lines = [];
  const failures = [];
  const accepted = acceptedFor(policy, source);
  for (const e of (policy.licences.embedded ?? []).filter((e) => e.source === source)) {
    const found = deps.filter((d) => d.name === e.crate);
    if (found.length === 0) {
      failures.push(`${source}: supply-chain.json says ${e.crate} embeds ${e.data}, but ${e.crate} is not a dependency: remove the entry`);
      continue;
    }
    let ok;
    try {
      ok = allows(accepted, parse(e.licence));
    } catch (err) {
      failures.push(`${source}: the data ${e.crate} embeds: cannot read its licence ${JSON.stringify(e.licence)}: ${err.message}`);
      continue;
    }
    const versions = found.map((d) => d.version).join(', ');
    if (ok) lines.push(`  ${e.crate} ${versions} embeds ${e.data}: ${e.licence} (supply-chain.json)`);
    else failures.push(`${source}: ${e.crate} ${versions} embeds ${e.data}, licensed ${JSON.stringify(e.licence)}, which supply-chain.json does not accept here`);
  }
  return { lines, failures };
}

function licenceOf(pkgJson) {
  if (typeof pkgJson.license === 'string') return pkgJson.license;
  if (pkgJson.license && typeof pkgJson.license.type === 'string') return pkgJson.license.type; // legacy object form
  if (Array.isArray(pkgJson.licenses)) return pkgJson.licenses.map((l) => (typeof l === 'string' ? l : l.type)).join(' OR '); // legacy list
  return undefined;
}

/**
 * npm: every package in DIR/package-lock.json (dev dependencies included). The licence comes from
 * the installed package.json under DIR/node_modules when that version is installed, else from the
 * lock file's own "license" field.
 */
export function checkNpmLicences(policy, source, dir) {
  const lockFile = join(dir, 'package-lock.json');
  if (!existsSync(lockFile)) return { lines: [], failures: [`${source}: no ${lockFile}`] };
  const lock = readJson(lockFile);
  if (!lock.packages) return { lines: [], failures: [`${source}: ${lockFile} has no "packages" (lockfileVersion ${lock.lockfileVersion}; npm 7 or later writes it)`] };
  const deps = [];
  let installed = 0;
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path === '' || entry.link) continue; // the project itself; workspace links are checked as their own projects
    const name = entry.name ?? path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
    const manifest = join(dir, path, 'package.json');
    let licence = entry.license;
    let from = 'package-lock.json';
    let pkgDir;
    if (existsSync(manifest)) {
      const pkg = readJson(manifest);
      if (pkg.version === entry.version) {
        licence = licenceOf(pkg);
        from = `${path}/package.json`;
        pkgDir = join(dir, path);
        installed++;
      }
    }
    deps.push({ name, version: entry.version, licence, from, dir: pkgDir });
  }
  const r = judge(policy, source, deps);
  r.lines[0] += ` (${installed} read from node_modules, ${deps.length - installed} from package-lock.json)`;
  return r;
}

const APACHE_2_0_MARKS = [
  'Apache License Version 2.0, January 2004 http://www.apache.org/licenses/',
  'TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION',
  '9. Accepting Warranty or Additional Liability.',
  'END OF TERMS AND CONDITIONS',
];

/** The product's licence must be the same in Cargo.toml, the SDK's package.json and LICENSE. */
export function checkProductLicence(policy, root) {
  const product = policy.product.licence;
  const lines = [];
  const failures = [];
  const check = (what, found) => {
    if (found === product) lines.push(`  ${what}: ${found}`);
    else failures.push(`${what} says ${JSON.stringify(found ?? null)}, the policy says ${product}`);
  };
  const cargo = readFileSync(join(root, 'Cargo.toml'), 'utf8');
  const section = /^\[workspace\.package\]\s*$([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(cargo)?.[1] ?? '';
  check('Cargo.toml [workspace.package] license', /^license\s*=\s*"([^"]*)"/m.exec(section)?.[1]);
  const sdk = join(root, 'sdk/node/package.json');
  check('sdk/node/package.json license', existsSync(sdk) ? readJson(sdk).license : undefined);
  const licenceFile = join(root, 'LICENSE');
  if (!existsSync(licenceFile)) {
    failures.push('LICENSE is missing: the repository must carry the text of its licence');
  } else if (product !== 'Apache-2.0') {
    failures.push(`LICENSE: the check knows the text of Apache-2.0 only, not of ${product}`);
  } else {
    const text = readFileSync(licenceFile, 'utf8').replace(/\s+/g, ' ');
    const missing = APACHE_2_0_MARKS.filter((m) => !text.includes(m));
    if (missing.length) failures.push(`LICENSE is not the Apache License 2.0 text (missing: ${missing.map((m) => JSON.stringify(m)).join(', ')})`);
    else lines.push('  LICENSE: the Apache License, Version 2.0');
  }
  lines.unshift(failures.length ? `product licence ${product}: MISMATCH` : `product licence ${product}: stated alike in every place`);
  return { lines, failures };
}

function parseArgs(argv) {
  const args = { audit: [], metadata: [], npm: [] };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i]?.replace(/^--/, '');
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`missing value after ${argv[i]}`);
    if (key === 'root' || key === 'policy') args[key] = value;
    else if (key in args) {
      const eq = value.indexOf('=');
      if (eq < 1) throw new Error(`--${key} wants LABEL=PATH, got ${value}`);
      args[key].push({ label: value.slice(0, eq), path: value.slice(eq + 1) });
    } else throw new Error(`unknown option ${argv[i]}`);
  }
  if (!args.root || !args.policy) throw new Error('--root and --policy are required');
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const policy = readJson(args.policy);
  const problems = validatePolicy(policy);
  if (problems.length) {
    for (const p of problems) console.error(`supply-chain.json: ${p}`);
    process.exit(1);
  }
  const failures = [];
  const section = (title, results) => {
    console.log(`\n--- ${title}`);
    for (const r of results) {
      for (const l of r.lines) console.log(l);
      failures.push(...r.failures);
    }
  };
  const reports = args.audit.map(({ label, path }) => {
    try {
      return { label, report: readJson(path) };
    } catch (e) {
      return { label, report: null, error: e.message };
    }
  });
  for (const r of reports.filter((r) => r.error)) failures.push(`${r.label}: no cargo-audit report (${r.error})`);
  section('advisories (RustSec)', [checkAdvisories(policy, reports.filter((r) => !r.error))]);
  section('licences', [
    ...args.metadata.map(({ label, path }) => checkCargoLicences(policy, label, readJson(path))),
    ...args.npm.map(({ label, path }) => checkNpmLicences(policy, label, path)),
    checkProductLicence(policy, args.root),
  ]);
  if (failures.length) {
    console.log(`\nsupply chain: ${failures.length} problem(s):`);
    for (const f of failures) console.log(`  - ${f}`);
    process.exit(1);
  }
  console.log('\nsupply chain: every advisory warning and every licence is covered by supply-chain.json');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) main();
