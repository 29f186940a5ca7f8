// Posts oversized bodies to a running ingest with Node's own fetch (undici), the client of
// the SDK and of most Node callers, and prints one JSON line per case: the status and body
// it read, or the error it got instead. Used by tests/tests/ingest_bad_input.rs.
//   node tests/clients/oversize-fetch.mjs http://127.0.0.1:PORT SIZE [SIZE...]
// Each size is sent to /api/track and /api/track/batch, plain and gzip, with a length
// (Content-Length) and as a stream (chunked).
import { randomBytes } from 'node:crypto';
import { gzipSync, constants } from 'node:zlib';

const [base, ...sizes] = process.argv.slice(2);

function plainBody(size) {
  const head = Buffer.from('{"site_id":1,"pathname":"');
  const body = Buffer.alloc(size, 0x78);
  head.copy(body);
  body.write('"}', size - 2);
  return body;
}

// Random bytes barely compress, so the gzip body is about as large as the plain one.
function gzipBody(size) {
  return gzipSync(randomBytes(size), { level: constants.Z_BEST_SPEED });
}

function streamOf(buf) {
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= buf.length) return controller.close();
      controller.enqueue(buf.subarray(at, at + (256 << 10)));
      at += 256 << 10;
    },
  });
}

for (const size of sizes.map(Number)) {
  const bodies = { plain: plainBody(size), gzip: gzipBody(size) };
  for (const path of ['/api/track', '/api/track/batch']) {
    for (const [encoding, buf] of Object.entries(bodies)) {
      for (const framing of ['length', 'stream']) {
        const headers = { 'content-type': 'application/json' };
        if (encoding === 'gzip') headers['content-encoding'] = 'gzip';
        const init = { method: 'POST', headers };
        if (framing === 'length') init.body = buf;
        else Object.assign(init, { body: streamOf(buf), duplex: 'half' });
        const started = performance.now();
        const result = { path, size, encoding, framing, bytes: buf.length };
        try {
          const resp = await fetch(base + path, init);
          result.status = resp.status;
          result.body = await resp.text();
        } catch (e) {
          result.error = `${e.message}: ${e.cause?.code ?? e.cause?.message ?? ''}`;
        }
        result.ms = Math.round(performance.now() - started);
        console.log(JSON.stringify(result));
      }
    }
  }
}
