// A stand-in for rivulet-ingest used by the benchmark baseline: reads gzip bodies, answers every
// /track/batch with "all accepted" (one result per event) and /track with success.
// It runs in its own process so its CPU does not count against the SDK's.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let answer: unknown = { success: true };
    if (req.url?.endsWith('/track/batch')) {
      const raw = Buffer.concat(chunks);
      const body = req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
      const events = (JSON.parse(body.toString('utf8')) as { events: { event_id: string }[] }).events;
      answer = {
        success: true,
        accepted: events.length,
        rejected: 0,
        results: events.map((e) => ({ status: 'accepted', event_id: e.event_id })),
      };
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(answer));
  });
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${(server.address() as AddressInfo).port}\n`);
});
// Ends with the benchmark: the parent closes our stdin.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
