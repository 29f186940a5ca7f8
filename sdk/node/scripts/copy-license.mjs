// The package carries the repository's LICENSE (npm shows it and tools read it from the tarball).
import { copyFileSync } from 'node:fs';
copyFileSync(new URL('../../../LICENSE', import.meta.url), new URL('../LICENSE', import.meta.url));
