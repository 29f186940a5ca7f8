// Builds script.js, the file ingest serves at GET /api/script.js, into
// ingest/assets/script.js (committed: ingest embeds it, so building Rivulet never needs
// npm), writes its sizes to size.json and into README.md's size line.
//   node scripts/build.mjs           build, write the three files, print the sizes
//   node scripts/build.mjs --check   build in memory; fail if ingest/assets/script.js,
//                                    size.json or README.md's sizes differ from it, or if
//                                    it is over the budget
// The budget: 2048 bytes gzipped (zlib level 9), the whole script.
import { build } from 'esbuild';
import { readFileSync, writeFileSync, mkdirSync, existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync, constants } from 'node:zlib';

export const GZIP_BUDGET = 2048;
/** The property names of the script's internal objects (Page, in src/page.ts). */
const INTERNAL_PROPS = /^(path|query)$/;
const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const OUT = here('../../../ingest/assets/script.js');
const SIZE = here('../size.json');
const README = here('../README.md');
/** README.md's size line, e.g. **3927 bytes, 1998 bytes gzipped**. */
const README_SIZE = /\*\*\d+ bytes, \d+ bytes gzipped\*\*/;

/** The minified script, built from src/index.ts. */
export async function bundle() {
  const result = await build({
    entryPoints: [here('../src/index.ts')],
    bundle: true,
    format: 'iife',
    platform: 'browser',
    // Browsers from 2020 on: optional chaining and ?? are kept, not rewritten longer.
    target: 'es2020',
    minify: true,
    legalComments: 'none',
    // No "use strict" prologue (tsconfig's strict implies it): the code does not rely on it.
    tsconfigRaw: { compilerOptions: { alwaysStrict: false } },
    // The script's own property names never leave it: shortened like local names. Quoted
    // names, the wire fields and the browser's APIs are left alone.
    mangleProps: INTERNAL_PROPS,
    write: false,
    logLevel: 'warning',
  });
  return Buffer.from(result.outputFiles[0].contents);
}

/** The sizes written to size.json: raw bytes, and gzipped at zlib's level 9. */
export function sizes(code) {
  return { bytes: code.length, gzip_bytes: gzipSync(code, { level: constants.Z_BEST_COMPRESSION }).length };
}

async function main() {
  const check = process.argv.includes('--check');
  const code = await bundle();
  const size = sizes(code);
  const sizeJson = JSON.stringify(size) + '\n';
  const readme = readFileSync(README, 'utf8');
  const readmeNow = readme.replace(README_SIZE, `**${size.bytes} bytes, ${size.gzip_bytes} bytes gzipped**`);
  const problems = [];
  if (!README_SIZE.test(readme)) problems.push('README.md has no size line (**N bytes, M bytes gzipped**)');
  if (check) {
    if (!existsSync(OUT) || !readFileSync(OUT).equals(code))
      problems.push(
        'ingest/assets/script.js differs from a fresh build of src/: run `npm run build` and commit it',
      );
    if (!existsSync(SIZE) || readFileSync(SIZE, 'utf8') !== sizeJson)
      problems.push('sdk/browser/size.json differs from the fresh build: run `npm run build` and commit it');
    if (readmeNow !== readme)
      problems.push(
        "sdk/browser/README.md's size line differs from the fresh build: run `npm run build` and commit it",
      );
  } else {
    mkdirSync(dirname(OUT), { recursive: true });
    writeFileSync(OUT, code);
    writeFileSync(SIZE, sizeJson);
    writeFileSync(README, readmeNow);
  }
  if (size.gzip_bytes > GZIP_BUDGET)
    problems.push(`script.js is ${size.gzip_bytes} bytes gzipped, over the budget of ${GZIP_BUDGET}`);
  console.log(
    `script.js: ${size.bytes} bytes, ${size.gzip_bytes} bytes gzipped (zlib level 9; budget ${GZIP_BUDGET})`,
  );
  for (const p of problems) console.error(`check: ${p}`);
  if (problems.length) process.exit(1);
  if (check) console.log('check: ingest/assets/script.js, size.json and the README are the fresh build');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
