import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

/** One request as the test server saw it. */
export interface Received {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The body as text, after gzip decoding when it was gzipped. */
  body: string;
  /** Bytes on the wire (before decoding). */
  wireBytes: number;
  /** Whether it came with Content-Encoding: gzip. */
  gzipped: boolean;
  /** The body parsed as JSON (undefined if it is not JSON). */
  json: any;
  at: number;
}

export type Handler = (req: Received, res: ServerResponse, index: number) => void | Promise<void>;

export interface TestServer {
  /** The SDK's analyticsHost for this server: `http://127.0.0.1:PORT/api`. */
  host: string;
  requests: Received[];
  close(): Promise<void>;
}

/** A local node:http server that records every request and lets the test decide each answer. */
export async function startServer(handler: Handler = (_req, res) => reply(res, 200, { success: true })): Promise<TestServer> {
  const requests: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const gzipped = req.headers['content-encoding'] === 'gzip';
      const body = (gzipped ? gunzipSync(raw) : raw).toString('utf8');
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch {
        json = undefined;
      }
      const received: Received = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body,
        wireBytes: raw.length,
        gzipped,
        json,
        at: Date.now(),
      };
      requests.push(received);
      void handler(received, res, requests.length - 1);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    host: `http://127.0.0.1:${port}/api`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function reply(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/** The batch endpoint's answer accepting every event of a batch request. */
export function acceptAll(req: Received): unknown {
  const events = (req.json?.events ?? []) as { event_id: string }[];
  return {
    success: true,
    accepted: events.length,
    rejected: 0,
    results: events.map((e) => ({ status: 'accepted', event_id: e.event_id })),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Captures console output of one kind while fn runs. */
export async function captureConsole(method: 'log' | 'error', fn: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const original = console[method];
  console[method] = (...args: unknown[]) => {
    lines.push(args.map(String).join(' '));
  };
  try {
    await fn();
  } finally {
    console[method] = original;
  }
  return lines;
}

export const API_KEY = 'rb_0123456789abcdef0123456789abcdef';

/** Polls until cond() is true or timeoutMs passes (then the test's own assertion reports it). */
export async function waitFor(cond: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond() && Date.now() < deadline) await sleep(10);
}
