// The package is "type": "module"; this marker makes Node read dist/cjs/*.js as CommonJS.
import { writeFileSync } from 'node:fs';
writeFileSync(new URL('../dist/cjs/package.json', import.meta.url), '{"type":"commonjs"}\n');
