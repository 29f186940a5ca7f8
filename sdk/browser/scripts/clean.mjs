// Removes build output so a rebuild never ships or runs stale files (portable: no rm -rf in
// npm scripts). Arguments: the folders to remove (dist, build-test).
import { rmSync } from 'node:fs';
for (const dir of process.argv.slice(2)) rmSync(new URL(`../${dir}`, import.meta.url), { recursive: true, force: true });
