import { randomUUID } from 'node:crypto';
import { gzip } from 'node:zlib';
import type { Platform } from './platform.js';

/**
 * Node's (and Bun's and Deno's, which resolve the "node" export condition too): zlib's gzip
 * at level 1 costs about a third of the CPU of CompressionStream (which has no level) for
 * nearly the same size on event JSON, and runs off the main thread; node:crypto gives
 * UUIDs on Node 18, which has no global Web Crypto.
 */
export const nodePlatform: Platform = {
  randomUUID,
  gzip: (body) =>
    new Promise((resolve, reject) => {
      gzip(body, { level: 1 }, (err, out) => (err ? reject(err) : resolve(out)));
    }),
};
